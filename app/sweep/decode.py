"""The Sweep tab's logic: validate a tau x k sweep request, run it decode by decode, read a picked point.

A sweep is core.bench's: the exact decoder and EntropyCache at every (tau, k) of the grid decode the
same held-out items of one task (stories, or word problems alone or after worked examples),
interleaved, and each point is a bench row (speedup, accuracy, agreement, ...). Every list and count
a visitor sends is bounded here, since the HTTP API accepts anything; nothing is clamped silently.
No gradio here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.controls.declared import BOUNDS, check_number, number_text
from core.bench import Progress, sweep_progress
from core.decoder import DecodeConfig
from core.tasks import held_out

MAX_TAUS = 8
MAX_KS = 4
MAX_PROBLEMS = 50
DEFAULT_TAUS = "0.1, 0.5, 1, 2, 4"  # across the stories' knee (docs/BENCHMARKS.md)
DEFAULT_KS = "2"
DEFAULT_PROBLEMS = 6
# What a visitor picks -> (core.tasks task, worked examples before each problem). Stories first: they
# have real choices, so tau changes what is recomputed; word problems are nearly certain everywhere.
TASKS = {"stories": ("stories", 0), "word problems": ("words", 0), "word problems, 4-shot": ("words", 4)}


@dataclass(frozen=True)
class SweepParams:
    model: str
    task: str  # a key of TASKS
    taus: tuple[float, ...]
    ks: tuple[int, ...]
    problems: int
    gen_len: int
    block_len: int
    steps: int  # 0: one token per step
    threshold: float  # 0: off

    def decode_config(self) -> DecodeConfig:
        """Greedy decoding, as the bench measures it."""
        return DecodeConfig(gen_len=self.gen_len, block_len=self.block_len, steps=self.steps or None,
                            threshold=self.threshold or None)

    def items(self) -> list:
        task, shots = TASKS[self.task]
        return held_out(task, self.problems, shots=shots)


def parse_list(text: object, name: str, most: int) -> tuple:
    """'0.1, 0.5 1' -> (0.1, 0.5, 1.0): distinct values of control `name`, each checked against its
    bounds, at most `most` of them, in the order given."""
    label = BOUNDS[name].label
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Give at least one value for {label}.")
    if len(text) > 200:
        raise ValueError(f"The list for {label} is too long ({len(text)} characters).")
    values = []
    for item in re.split(r"[,\s]+", text.strip()):
        try:
            number = float(item)
        except ValueError:
            raise ValueError(f"{label}: {item!r} is not a number.") from None
        value = check_number(name, number)
        if value not in values:
            values.append(value)
    if len(values) > most:
        raise ValueError(f"At most {most} values for {label}, got {len(values)}.")
    return tuple(values)


def parse_sweep(
    model: object, task: object, taus: object, ks: object, problems: object, gen_len: object, block_len: object,
    steps: object, threshold: object, *, models: list[str],
) -> SweepParams:
    """Validate one sweep's raw inputs (as the UI or an API client sent them)."""
    if model not in models:
        raise ValueError(f"Unknown model {model!r}; choose one of: {', '.join(models)}.")
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of: {', '.join(TASKS)}.")
    if isinstance(problems, bool) or not isinstance(problems, (int, float)) or not float(problems).is_integer():
        raise ValueError(f"The number of problems must be a whole number from 1 to {MAX_PROBLEMS}, got {problems!r}.")
    if not 1 <= problems <= MAX_PROBLEMS:
        raise ValueError(f"The number of problems must be between 1 and {MAX_PROBLEMS}, got {number_text(problems)}.")
    params = SweepParams(
        model=str(model),
        task=str(task),
        taus=parse_list(taus, "tau", MAX_TAUS),
        ks=parse_list(ks, "k", MAX_KS),
        problems=int(problems),
        gen_len=check_number("gen_len", gen_len),
        block_len=check_number("block_len", block_len),
        steps=check_number("steps", steps),
        threshold=check_number("threshold", threshold),
    )
    if params.steps and params.threshold:
        raise ValueError("Set steps to 0 or the parallel-decoding threshold to 0: they do not go together.")
    try:
        params.decode_config()
    except ValueError as e:
        raise ValueError(f"These controls do not fit together: {e}.") from None
    return params


def parse_point(value: object) -> tuple[float, int]:
    """'[tau, k, ...]' as the page sends it -> (tau, k), each checked against its bounds."""
    data = None
    if isinstance(value, str) and len(value) < 200:
        try:
            data = json.loads(value)
        except json.JSONDecodeError:
            pass  # said below, in words a visitor can act on: not the parser's
    if not isinstance(data, list) or len(data) < 2:
        tau, k = BOUNDS["tau"], BOUNDS["k"]
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:60] + "..."
        raise ValueError(f"A picked point must be [tau, k], with tau {tau.allowed()} and k {k.allowed()}; "
                         f"got {shown}.")
    return check_number("tau", data[0]), check_number("k", data[1])


def sweep_snapshots(
    model, tokenizer, params: SweepParams, should_stop: Callable[[], bool] = lambda: False
) -> Iterator[Progress]:
    """The sweep's progress after each decode (plain data: core.bench.Progress). Stops between two
    decodes once should_stop() is true."""
    for progress in sweep_progress(model, tokenizer, params.items(), list(params.taus), list(params.ks),
                                   params.decode_config()):
        yield progress
        if should_stop():
            return
