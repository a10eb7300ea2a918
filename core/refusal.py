"""How core words a refused value: a name that is not among its choices (check_choice), and the value
itself quoted briefly (shown), so that a message stays short whatever a caller sent.

A bad value is a ValueError that names the setting and says what it allows; the app's handlers word
the same refusal for a visitor (app/serving/sent.py) through the same check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SHOWN_CHARS = 60  # a value quoted in a message is cut here: a client may send a megabyte
# A name not among its choices, as core says it: "graphs must be one of auto, on, off, got 'yes'".
NOT_A_CHOICE = "{what} must be one of {choices}, got {value}"


def check_choice(value: object, choices: Sequence[str], what: str, refusal: str = NOT_A_CHOICE) -> str:
    """`value` if it is one of `choices` (a name), else a ValueError in the words of `refusal`, which
    names `what`, the value (shown) and the choices (a setting chosen by name: the graphs and fusion
    modes, a declared setting's choices, a dropdown's)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(refusal.format(what=what, value=shown(value), choices=", ".join(choices)))
    return value


def shown(value: object) -> str:
    """`value` for a message: its repr (which escapes what cannot be printed) cut to SHOWN_CHARS; NaN
    as NaN, and an integer too long for repr said so."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    try:
        text = repr(value)
    except ValueError:  # past sys.get_int_max_str_digits()
        return "an integer too long to write out"
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}..."
