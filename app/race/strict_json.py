"""A JSON value read strictly, as a file a visitor uploads is (a trace: app/race/trace_reader.py): its
type, its size and its range checked, an error naming where it is (`lanes[1].events[7].confidences[0]`)
and what was expected, in plain words. No gradio here.
"""

from __future__ import annotations

import math

from core.loading import check_unicode


def read_object(raw: object, where: str, keys: tuple[str, ...] | list[str], optional: bool = False) -> dict:
    """A JSON object with exactly `keys` (any keys if `optional` and keys is empty)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {kind_of(raw)}")
    if optional and not keys:
        return dict(raw)
    missing = [k for k in keys if k not in raw]
    extra = [k for k in raw if k not in keys]
    if missing or extra:
        problem = f"missing {', '.join(missing)}" if missing else f"unknown field {quoted(extra[0])}"
        raise ValueError(f"{where}: {problem}")
    return dict(raw)


def read_ints(raw: object, where: str, max_len: int, low: int, high: int) -> list[int]:
    return [read_int(v, f"{where}[{i}]", low, high) for i, v in enumerate(read_list(raw, where, max_len))]


def read_numbers(raw: object, where: str, max_len: int, low: float, high: float) -> list[float]:
    return [read_number(v, f"{where}[{i}]", low, high) for i, v in enumerate(read_list(raw, where, max_len))]


def read_list(raw: object, where: str, max_len: int) -> list:
    return read_sized(raw, where, list, max_len, "entries")


def read_text(raw: object, where: str, max_len: int) -> str:
    return check_unicode(read_sized(raw, where, str, max_len, "characters"), where)


def read_sized(raw: object, where: str, kind: type, max_len: int, unit: str):
    if not isinstance(raw, kind):
        raise ValueError(f"{where}: expected {kind_of(kind())}, got {kind_of(raw)}")
    if len(raw) > max_len:
        raise ValueError(f"{where}: at most {max_len} {unit}, got {len(raw)}")
    return raw


def read_int(raw: object, where: str, low: int, high: int) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ValueError(f"{where}: expected a whole number, got {kind_of(raw)}")
    if not low <= raw <= high:
        raise ValueError(f"{where}: expected {low} to {high}, got {raw}")
    return raw


def read_number(raw: object, where: str, low: float, high: float) -> float:
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        raise ValueError(f"{where}: expected a number, got {kind_of(raw)}")
    if not (math.isfinite(raw) and low <= raw <= high):
        raise ValueError(f"{where}: expected a number from {low:g} to {high:g}, got {raw}")
    return float(raw)


def read_optional_number(raw: object, where: str, low: float, high: float) -> float | None:
    return None if raw is None else read_number(raw, where, low, high)


def read_bool(raw: object, where: str) -> bool:
    if not isinstance(raw, bool):
        raise ValueError(f"{where}: expected true or false, got {kind_of(raw)}")
    return raw


def kind_of(raw: object) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}.get(
        type(raw), f"the number {raw}" if isinstance(raw, int | float) else type(raw).__name__)


def quoted(raw: object) -> str:
    return repr(raw)[:60]
