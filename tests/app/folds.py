"""Opening a fold in the browser tests, as a visitor does: the controls inside are typed into only once
the page has given them their values.

Gradio draws what a closed fold holds only when it first opens, and a frame later sets every control it
drew to the value the page holds for it (render_previously_invisible_children in its frontend), over
whatever was typed in between. A visitor never types within that frame; a test does, and a length typed
there was swept at the model's own (256 for 32)."""

from __future__ import annotations

NEXT_FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def open_fold(page, fold: str, header: str, inside: str) -> None:
    """Open the fold `fold` (a selector) by its header text `header`, then wait until the control
    `inside` (a selector within it) shows and the frames after it have passed."""
    page.locator(fold).get_by_text(header).click()
    page.locator(f"{fold} {inside}").first.wait_for(state="visible", timeout=30_000)
    page.evaluate(NEXT_FRAMES)
