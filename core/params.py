"""A setting declared once: name, type, default, bounds, a line of help and the range a UI offers.

A policy's parameters (CachePolicy.parameters) and the decode settings (DecodeConfig.parameters) are
declared this way (a number, or a name out of a few `choices`), and everything else is derived from
the declarations: the objects' own checks, the command line's flags (evaluation/cli/flags.py), the
bench's columns and sweeps, and the app's controls (a slider, or a dropdown of the choices), whose
server-side bounds are the declared UI range. A bad value is a ValueError that names the setting and
what it allows (core/refusal.py words it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.refusal import check_choice, shown


@dataclass(frozen=True)
class Param:
    name: str
    kind: type  # int, float, or str for a setting chosen by name out of `choices`
    default: int | float | str | None  # None: an optional setting, unset unless given
    low: int | float = -math.inf  # inclusive, unless low_open
    high: int | float = math.inf  # inclusive
    help: str = ""
    # The range a UI offers (a slider's), inside [low, high]; default: that. A server that takes a UI's
    # values bounds them to it (check(..., ui=True)).
    ui: tuple[int | float, int | float] | None = None
    low_open: bool = False  # True: low itself is refused (a fraction in (0, 1])
    label: str = ""  # what a UI calls it; default: the name
    unset: str = ""  # an optional setting's meaning when it is not given: "one token per step"
    choices: tuple[str, ...] = ()  # a setting of kind str: the names it may be, the default first in a UI

    def __post_init__(self) -> None:
        if self.kind not in (int, float, str):
            raise TypeError(f"parameter {self.name}: kind must be int, float or str, got {self.kind!r}")
        if (self.kind is str) != bool(self.choices):
            raise TypeError(f"parameter {self.name}: a setting chosen by name (kind str), and only it, has choices")
        if (self.default is None) != bool(self.unset):
            raise TypeError(f"parameter {self.name}: an optional one (default None), and only it, says what "
                            "being unset means")
        self.check(self.default)  # a declaration whose default is out of its own range is a bug
        if self.ui is not None:
            self.check(self.ui[0]), self.check(self.ui[1])

    @property
    def slider_range(self) -> tuple[int | float, int | float]:
        if self.choices:
            raise ValueError(f"parameter {self.name} is chosen by name ({', '.join(self.choices)}), not on a slider")
        lo, hi = self.ui or (self.low, self.high)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"parameter {self.name} needs a finite `ui` range for a slider")
        return lo, hi

    def bounds(self, ui: bool = False) -> tuple[int | float, int | float, bool]:
        """(low, high, low_open): the declared bounds, or with `ui` the UI's range."""
        if ui and self.ui is not None:
            low, high = self.ui
            return low, high, self.low_open and low == self.low
        return self.low, self.high, self.low_open

    def expected(self, ui: bool = False) -> str:
        """What a valid value is, in words: 'a positive integer', 'a number in [0, 1]', 'one of block, dream'."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        low, high, low_open = self.bounds(ui)
        noun = "integer" if self.kind is int else "number"
        if high == math.inf and low in (0, 1) and not low_open:
            return f"a {'non-negative' if low == 0 else 'positive'} {noun}"
        article = "an" if self.kind is int else "a"
        if high == math.inf and low == -math.inf:
            return f"{article} {noun}"
        bracket = "(" if low_open else "["
        return f"{article} {noun} in {bracket}{number_text(low)}, {number_text(high)}]"

    def check(self, value: object, ui: bool = False, label: str = "") -> int | float | str | None:
        """`value` as this parameter's type if it is one inside the bounds (with `ui`, inside the UI's
        range; for a setting chosen by name, one of its choices), else a ValueError that names it (as
        `label`, default its name). None is the value of an optional setting that is not set."""
        if value is None and self.default is None:
            return None
        if self.choices:
            return check_choice(value, self.choices, label or self.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            item = getattr(value, "item", None)  # numpy scalars and 0-d tensors are numbers too
            value = item() if callable(item) and getattr(value, "ndim", 1) == 0 else value
        low, high, low_open = self.bounds(ui)
        bad = isinstance(value, bool) or not isinstance(value, int | float)
        try:
            bad = bad or math.isnan(value) or (self.kind is int and not float(value).is_integer())
        except OverflowError:  # an integer past a float's range is past every bound
            bad = True
        if bad or not low <= value <= high or (low_open and value == low):
            raise ValueError(f"{label or self.name} must be {self.expected(ui)}, got {shown(value)}")
        return int(value) if self.kind is int else float(value)


def value_text(value: int | float | str | None) -> str:
    """A declared setting's value as a person writes it: a number as number_text does, a name as it is."""
    return value if isinstance(value, str) else number_text(value)


def number_text(value: float) -> str:
    """A bound as a person writes it: 2147483647 in full (not 2.14748e+09), 0.5 as 0.5."""
    return str(int(value)) if math.isfinite(value) and float(value).is_integer() else f"{value:g}"


def check_params(policy: str, declared: tuple[Param, ...], given: dict) -> dict:
    """The full set of values for `declared`: given ones checked, missing ones at their default."""
    names = [p.name for p in declared]
    unknown = sorted(set(given) - set(names))
    if unknown:
        allowed = ", ".join(names) or "none"
        raise ValueError(f"bad parameters for policy {policy!r}: no parameter {unknown[0]!r} (it has: {allowed})")
    return {p.name: p.check(given[p.name]) if p.name in given else p.default for p in declared}
