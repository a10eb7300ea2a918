"""A policy's parameters, declared once: name, type, default, bounds and a line of help.

Everything else is derived from these declarations: the policy's own validation, the command line's
flags (core/cli.py), the bench's columns and sweeps, and the app's controls. A bad value is a
ValueError that names the parameter and its allowed range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    name: str
    kind: type  # int or float
    default: int | float
    low: int | float = -math.inf  # inclusive, unless low_open
    high: int | float = math.inf  # inclusive
    help: str = ""
    ui: tuple[int | float, int | float] | None = None  # a slider's range, inside [low, high]; default: that
    low_open: bool = False  # True: low itself is refused (a fraction in (0, 1])

    def __post_init__(self) -> None:
        if self.kind not in (int, float):
            raise TypeError(f"parameter {self.name}: kind must be int or float, got {self.kind!r}")
        self.check(self.default)  # a declaration whose default is out of its own range is a bug
        if self.ui is not None:
            self.check(self.ui[0]), self.check(self.ui[1])

    @property
    def slider_range(self) -> tuple[int | float, int | float]:
        lo, hi = self.ui or (self.low, self.high)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"parameter {self.name} needs a finite `ui` range for a slider")
        return lo, hi

    def expected(self) -> str:
        """What a valid value is, in words: 'a positive integer', 'a number in [0, 1]'."""
        noun = "integer" if self.kind is int else "number"
        if self.high == math.inf and self.low == -math.inf:
            return f"a {noun}"
        if self.high == math.inf and self.low in (0, 1) and not self.low_open:
            return f"a {'non-negative' if self.low == 0 else 'positive'} {noun}"
        article, bracket = "an" if self.kind is int else "a", "(" if self.low_open else "["
        return f"{article} {noun} in {bracket}{self.low:g}, {self.high:g}]"

    def check(self, value: object) -> int | float:
        """`value` as this parameter's type if it is one inside the bounds, else a ValueError naming it."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            item = getattr(value, "item", None)  # numpy scalars and 0-d tensors are numbers too
            value = item() if callable(item) and getattr(value, "ndim", 1) == 0 else value
        bad = isinstance(value, bool) or not isinstance(value, int | float)
        bad = bad or math.isnan(value) or (self.kind is int and not float(value).is_integer())
        if bad or not self.low <= value <= self.high or (self.low_open and value == self.low):
            shown = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
            raise ValueError(f"{self.name} must be {self.expected()}, got {shown}")
        return int(value) if self.kind is int else float(value)


def check_params(policy: str, declared: tuple[Param, ...], given: dict) -> dict:
    """The full set of values for `declared`: given ones checked, missing ones at their default."""
    names = [p.name for p in declared]
    unknown = sorted(set(given) - set(names))
    if unknown:
        allowed = ", ".join(names) or "none"
        raise ValueError(f"bad parameters for policy {policy!r}: no parameter {unknown[0]!r} (it has: {allowed})")
    return {p.name: p.check(given[p.name]) if p.name in given else p.default for p in declared}
