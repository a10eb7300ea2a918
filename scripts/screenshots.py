"""Retake the README's three screenshots on the embedded model: a race, the Drift tab, a Sweep.

    python scripts/screenshots.py                 # writes docs/{app,drift,sweep}-screenshot.png
    python scripts/screenshots.py --out runs/shots --sweep-prompts 2

It serves the app in this process on loopback, drives Debian's Chromium through Playwright (as the
browser tests do) with the page's own defaults (the Race's paper comparison on the long example, the
Drift tab's story), and prints what each tab reported (the race's speedup, the drift's sentences, the
sweep's banner and its picked point). Run it alone on the machine: the race's speedup is measured while
it runs.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from app.serving.device_thread import CPU_THREAD, decode_threads  # noqa: E402
from app.serving.registry import build_registry  # noqa: E402
from app.sweep.decode import MAX_PROBLEMS  # noqa: E402
from app.ui import build_demo, launch  # noqa: E402
from scripts.ports import free_port  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
VIEWPORT = {"width": 1400, "height": 1000}
TIMEOUT_MS = 600_000


def banner_says(page, element: str, text: str) -> None:
    page.wait_for_function(f"document.querySelector('#{element}').innerText.includes({text!r})", timeout=TIMEOUT_MS)


def race(page, out: Path) -> str:
    page.locator("#run-btn").click()
    banner_says(page, "banner", "speedup (measured)")
    page.locator("#trace a[download]").wait_for(timeout=TIMEOUT_MS)
    page.screenshot(path=str(out / "app-screenshot.png"), full_page=True)
    return page.locator("#banner").inner_text()


def drift(page, out: Path) -> str:
    page.get_by_role("tab", name="Drift").click()
    page.locator("#drift-run-btn").click()
    banner_says(page, "drift-banner", "Done")
    page.screenshot(path=str(out / "drift-screenshot.png"), full_page=True)
    return page.locator("#drift-banner").inner_text()


def sweep(page, out: Path, prompts: int) -> str:
    """Held-out stories at the default taus, then the point of tau 2 (past the knee) picked: its texts."""
    page.get_by_role("tab", name="Sweep").click()
    page.locator("#sweep-task").get_by_label("stories", exact=True).check()
    number = page.locator("#sweep-ctl-problems input[type=number]")
    number.fill(str(prompts))
    number.press("Enter")
    page.locator("#sweep-run-btn").click()
    banner_says(page, "sweep-banner", "Sweep done")
    for tau in ("0.1", "0.5", "1", "2"):  # from no point picked: the lowest tau, then up one at a time
        page.locator("#sweep-higher").click()
        banner_says(page, "sweep-loaded", f"tau {tau}, k 2")
    page.screenshot(path=str(out / "sweep-screenshot.png"), full_page=True)
    return page.locator("#sweep-banner").inner_text() + " " + page.locator("#sweep-point .ec-point-head").inner_text()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs")
    ap.add_argument("--sweep-prompts", type=int, default=4, help="held-out stories the Sweep decodes")
    args = ap.parse_args(argv)
    if not 1 <= args.sweep_prompts <= MAX_PROBLEMS:
        ap.error(f"--sweep-prompts must be in [1, {MAX_PROBLEMS}], got {args.sweep_prompts}")
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    registry = build_registry(cuda=False)
    registry.preload()
    demo = build_demo(registry)
    url = launch(demo, "127.0.0.1", free_port())
    done, failed = threading.Event(), []

    def shoot_all() -> None:
        try:
            with sync_playwright() as p:
                chrome = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    for shoot in (race, drift, lambda page, out: sweep(page, out, args.sweep_prompts)):
                        page = chrome.new_page(viewport=VIEWPORT)
                        page.goto(url, wait_until="domcontentloaded")
                        print(shoot(page, args.out).strip().replace("\n", " "), flush=True)
                        page.close()
                finally:
                    chrome.close()
        except BaseException as e:  # re-raised on the main thread below
            failed.append(e)
        finally:
            done.set()

    # The browser runs on a thread of its own: as in app.py, the main thread runs every CPU decode
    # (app/serving/device_thread.py), so the race on the screenshot is measured as a visitor's would be.
    torch.set_num_threads(decode_threads())  # app.py's default team
    threading.Thread(target=shoot_all).start()
    try:
        CPU_THREAD.serve(until=done.is_set)
    finally:
        demo.close()
    if failed:
        raise failed[0]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
