"""Policies by name, so the CLI, the bench and the app can list and build them."""

from __future__ import annotations

from collections.abc import Callable

from core.policies.base import CachePolicy

POLICIES: dict[str, type[CachePolicy]] = {}


def register(name: str) -> Callable[[type[CachePolicy]], type[CachePolicy]]:
    def add(cls: type[CachePolicy]) -> type[CachePolicy]:
        POLICIES[name] = cls
        return cls

    return add


def make_policy(name: str, **params) -> CachePolicy:
    """Build a registered policy; unknown names and parameters raise ValueError."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}")
    cls = POLICIES[name]
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"bad parameters for policy {name!r}: {e}") from None
