"""The status line atop every tab: what the run is doing, how fast, or why it ended.

`message` is HTML (a bold speedup, a progress bar): whatever in it a visitor or a model wrote must be
escaped by the caller. No gradio here.
"""

from __future__ import annotations

CSS = """
.ec-banner { font-size: 18px; padding: 8px 12px; border-radius: 8px; background: #eef3ff; border: 1px solid #c9d6f5; }
.ec-note { font-size: 13px; color: #555; }
"""


def banner(message: str) -> str:
    return f'<div class="ec-banner">{message}</div>'


STOPPED = banner("Stopped.")
