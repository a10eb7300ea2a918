"""Fixtures of the app's tests: the model registry they serve from, and the app served in this process."""

import os
import threading
from types import SimpleNamespace

import pytest

from scripts.ports import free_port


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
    from serving_stubs import gpu_stand_in

    return gpu_stand_in(registry, monkeypatch)


@pytest.fixture(scope="module")
def served():
    """The whole app served on 127.0.0.1 as on a Space (a visitor's address is X-Forwarded-For's last
    entry), with the embedded model (or ENTROPYCACHE_MODEL) preloaded: its url, registry and demo."""
    from app.serving.device_thread import CPU_THREAD
    from app.serving.registry import build_registry
    from app.ui import build_demo, launch

    registry = build_registry(embedded=os.environ.get("ENTROPYCACHE_MODEL"), cuda=False)
    registry.preload()
    demo = build_demo(registry, proxied=True)
    url = launch(demo, "127.0.0.1", free_port())
    # As in `python app.py`, one thread runs every CPU decode (there the main thread; here the tests have it)
    stop = threading.Event()
    decoding = threading.Thread(target=CPU_THREAD.serve, kwargs={"until": stop.is_set}, daemon=True)
    decoding.start()
    yield SimpleNamespace(url=url, registry=registry, demo=demo)
    demo.close()
    stop.set()
    decoding.join(timeout=30)
