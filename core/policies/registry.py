"""Policies by name, so the CLI, the bench and the app can list and build them."""

from __future__ import annotations

from collections.abc import Callable

from core.policies.base import CachePolicy

POLICIES: dict[str, type[CachePolicy]] = {}


def register(name: str) -> Callable[[type[CachePolicy]], type[CachePolicy]]:
    """Class decorator: make the policy buildable as `name` (and give the class that name)."""

    def add(cls: type[CachePolicy]) -> type[CachePolicy]:
        cls.name = name
        POLICIES[name] = cls
        return cls

    return add


def make_policy(name: str, **params: object) -> CachePolicy:
    """Build a registered policy; unknown names and bad parameters raise ValueError naming them."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}")
    return POLICIES[name](**params)
