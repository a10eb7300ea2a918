"""The status line atop every tab: what the run is doing, how fast, or why it ended, or why an input
was refused.

`message` is HTML (a bold speedup, a progress bar): whatever in it a visitor or a model wrote must be
escaped by the caller. A refusal is plain text, escaped here. No gradio here.
"""

from __future__ import annotations

import functools
import html
import inspect
from collections.abc import Callable, Sequence

CSS = """
.ec-banner { font-size: 18px; padding: 8px 12px; border-radius: 8px; background: #eef3ff; border: 1px solid #c9d6f5; }
.ec-banner.ec-refused { background: #fff4e5; border-color: #f0b45a; }
.ec-note { font-size: 13px; color: #555; }
.ec-changed { font-size: 13px; color: #8a4b00; }
"""


def banner(message: str) -> str:
    return f'<div class="ec-banner">{message}</div>'


def changes_html(changed: Sequence[str]) -> str:
    """What a run decodes otherwise than it was sent (each said as the value asked, the value used and why),
    marked apart in the status line beside the run, its text escaped."""
    return "".join(f" <span class='ec-changed'>{html.escape(change, quote=False)}</span>" for change in changed)


def refused(message: str) -> str:
    """Why an input was refused (or a run could not go on): told in the status line, the tab's other
    panels left as they were. An API client finds it in the same output, the class marking it."""
    return f'<div class="ec-banner ec-refused" role="alert">{html.escape(message, quote=False)}</div>'


def refusing(status: object, handler: Callable) -> Callable:
    """`handler`, with a ValueError it raises (a check of what it was sent) told in `status`, the tab's
    status line, alone: the one way a handler refuses, so its other outputs stay as they were. A
    generator handler's refusal is its last update. The wrapper keeps the handler's signature, by which
    Gradio passes its inputs."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def streamed(*args, **kwargs):
            try:
                yield from handler(*args, **kwargs)
            except ValueError as e:
                yield {status: refused(str(e))}
        return streamed

    @functools.wraps(handler)
    def answered(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except ValueError as e:
            return {status: refused(str(e))}
    return answered


def refuses(method: Callable) -> Callable:
    """refusing, for a handler method of an object whose `status` is its tab's status line."""
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def streamed(self, *args, **kwargs):
            yield from refusing(self.status, functools.partial(method, self))(*args, **kwargs)
        return streamed

    @functools.wraps(method)
    def answered(self, *args, **kwargs):
        return refusing(self.status, functools.partial(method, self))(*args, **kwargs)
    return answered


STOPPED = banner("Stopped.")
