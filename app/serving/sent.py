"""A choice a client sent (a dropdown's, a radio's), checked against what the page offers, in the tab's
words: the model registry's labels, and every tab's choices (app/controls, app/sweep), check through it.

The HTTP API accepts any JSON a client sends: values no widget offers, and text that is not valid Unicode
(core.loading.check_unicode refuses that; core.policies.params.shown quotes a value briefly). Every
handler checks what it is sent before a tokenizer, a parser or Gradio's own checks meet it. No gradio here.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.policies.params import shown


def check_choice(value: object, offered: Sequence[str], what: str) -> str:
    """`value` when it is one of `offered` (a dropdown's or a radio's choices), else a ValueError that
    names `what` and lists the choices."""
    if not isinstance(value, str) or value not in offered:
        raise ValueError(f"Unknown {what} {shown(value)}; choose one of: {', '.join(offered)}.")
    return value
