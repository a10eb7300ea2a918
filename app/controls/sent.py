"""What a client sent, before anything reads it: text that is valid Unicode, and a choice checked
against what the page offers (a value in a message is shown by core.policies.params.shown).

The HTTP API accepts any JSON a client sends, and JSON can carry what Python text cannot be written
out as (a lone surrogate, "\\udcff") and values no widget offers; so every handler checks what it is
sent here, in its own words, before a tokenizer, a parser or Gradio's own checks meet it. No gradio here.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.policies.params import shown


def check_unicode(text: str, what: str) -> str:
    """`text` when every character can be written as UTF-8, else a ValueError naming the first that
    cannot (a lone surrogate): a tokenizer, a file or the answer's JSON would fail on it later."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} has a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start + 1}, "
                         "which is not a character: send valid Unicode text.") from None
    return text


def check_choice(value: object, offered: Sequence[str], what: str) -> str:
    """`value` when it is one of `offered` (a dropdown's or a radio's choices), else a ValueError that
    names `what` and lists the choices."""
    if not isinstance(value, str) or value not in offered:
        raise ValueError(f"Unknown {what} {shown(value)}; choose one of: {', '.join(offered)}.")
    return value
