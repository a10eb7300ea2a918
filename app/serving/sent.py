"""A choice a client sent (a dropdown's, a radio's), checked against what the page offers, in the tab's
words: the model registry's labels, and every tab's choices (app/controls, app/sweep), check through it.

The HTTP API accepts any JSON a client sends: values no widget offers, and text that is not valid Unicode
(core.loading.check_unicode refuses that; core.refusal.shown quotes a value briefly). Every
handler checks what it is sent before a tokenizer, a parser or Gradio's own checks meet it. No gradio here.
"""

from __future__ import annotations

from collections.abc import Sequence

from core import refusal

NOT_OFFERED = "Unknown {what} {value}; choose one of: {choices}."  # a visitor's words for core's refusal


def check_choice(value: object, offered: Sequence[str], what: str) -> str:
    """`value` when it is one of `offered` (a dropdown's or a radio's choices), else a ValueError that
    names `what` and lists the choices: core's check (core.refusal.check_choice), in the tab's words."""
    return refusal.check_choice(value, offered, what, NOT_OFFERED)
