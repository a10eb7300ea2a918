"""Fixtures of the app's tests: the model registry they serve from."""

import os

import pytest


@pytest.fixture(scope="module")
def registry():
    """The app's model registry on the embedded model (or ENTROPYCACHE_MODEL), preloaded."""
    from app.serving.registry import build_registry

    reg = build_registry(embedded=os.environ.get("ENTROPYCACHE_MODEL"), cuda=False)
    reg.preload()
    return reg


@pytest.fixture
def gpu_registry(registry, monkeypatch):
    """A registry with one 'gpu' model (cuda device) that is really the embedded model on the CPU."""
    import app.serving.registry
    from app.serving.registry import EMBEDDED_LABEL, ModelChoice, ModelRegistry

    monkeypatch.setattr(app.serving.registry, "load_model", lambda source, device, fusion: registry.get(EMBEDDED_LABEL))
    examples = registry.choice(EMBEDDED_LABEL).example_list  # the warm-up reads the long one: the model must read it
    return ModelRegistry([ModelChoice("gpu", "x", "cuda", 32, 16, examples)])
