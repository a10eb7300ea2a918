"""Fixtures of the app's tests: the model registry they serve from, the app served in this process, and a
real browser on it.

The browser tests need Debian's chromium at /usr/bin/chromium and the playwright package (test.sh
installs both where it can); they are skipped when one of them is missing, and fail instead when
REQUIRE_BROWSER=1 (as .ci/run sets), so CI cannot go green without them.
"""

import importlib.util
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.ports import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


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
    import torch

    from app.serving.device_thread import CPU_THREAD, decode_threads
    from app.serving.registry import build_registry
    from app.ui import build_demo, launch

    registry = build_registry(embedded=os.environ.get("ENTROPYCACHE_MODEL"), cuda=False)
    registry.preload()
    demo = build_demo(registry, proxied=True)
    url = launch(demo, "127.0.0.1", free_port())
    # As in `python app.py`, one thread runs every CPU decode (there the main thread; here the tests have it),
    # on every core but one (decode_threads): a team on every core waits at each barrier for the core the
    # browser draws on (docs/BENCHMARKS.md, "A busy core"). The tests' own reference decodes run on as many
    # threads, so that their sums run in the server's order.
    threads, decoding_threads = torch.get_num_threads(), decode_threads()
    torch.set_num_threads(decoding_threads)
    stop = threading.Event()
    decoding = threading.Thread(target=_serve, args=(CPU_THREAD, decoding_threads, stop.is_set), daemon=True)
    decoding.start()
    try:
        yield SimpleNamespace(url=url, registry=registry, demo=demo)
    finally:
        demo.close()
        stop.set()
        decoding.join(timeout=30)
        torch.set_num_threads(threads)


def _serve(device_thread, threads: int, until) -> None:
    """`device_thread` served from this thread, whose OpenMP team is `threads` (a team is its thread's)."""
    import torch

    torch.set_num_threads(threads)
    device_thread.serve(until=until)


def browser_missing() -> list[str]:
    """What the browser tests lack on this machine (nothing: they can run)."""
    missing = [] if Path(CHROMIUM).exists() else [f"chromium at {CHROMIUM}"]
    return missing + ([] if importlib.util.find_spec("playwright") else ["the playwright package"])


@pytest.fixture
def browser_ready() -> None:
    missing = browser_missing()
    if missing and os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail(f"REQUIRE_BROWSER=1 but this machine lacks {' and '.join(missing)}")
    if missing:
        pytest.skip(f"needs {' and '.join(missing)}")


@pytest.fixture
def viewport() -> dict:
    """The browser's window for the page fixture; a module overrides it (a projector's 1366x768)."""
    return {"width": 1400, "height": 1000}


@pytest.fixture
def page(browser_ready, served, viewport):
    """A page of Debian's Chromium, driven by Playwright, opened on the served app."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chrome = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page(viewport=viewport)
            page.goto(served.url, wait_until="domcontentloaded")
            yield page
        finally:
            chrome.close()
