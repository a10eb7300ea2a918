"""The status line atop every tab: what the run is doing, how fast, or why it ended, or why an input
was refused.

`message` is HTML (a bold speedup, a progress bar): whatever in it a visitor or a model wrote must be
escaped by the caller. A refusal is plain text, escaped here. No gradio here.
"""

from __future__ import annotations

import html

CSS = """
.ec-banner { font-size: 18px; padding: 8px 12px; border-radius: 8px; background: #eef3ff; border: 1px solid #c9d6f5; }
.ec-banner.ec-refused { background: #fff4e5; border-color: #f0b45a; }
.ec-note { font-size: 13px; color: #555; }
"""


def banner(message: str) -> str:
    return f'<div class="ec-banner">{message}</div>'


def refused(message: str) -> str:
    """Why an input was refused (or a run could not go on): told in the status line, the tab's other
    panels left as they were. An API client finds it in the same output, the class marking it."""
    return f'<div class="ec-banner ec-refused" role="alert">{html.escape(message, quote=False)}</div>'


STOPPED = banner("Stopped.")
