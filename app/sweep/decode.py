"""The Sweep tab's decoding half: a tau x k sweep request checked and built, run decode by decode, and
a picked point read back.

A sweep is core.bench's: the exact decoder and EntropyCache at every (tau, k) of the grid decode the
same held-out items of one task (stories, or word problems alone or after worked examples),
interleaved, and each point is a bench row (speedup, accuracy, agreement, ...). Every list and count
a visitor sends is bounded here, by the controls' declared ranges (app/controls/declared.py), since
the HTTP API accepts anything; nothing is clamped silently. No gradio here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.controls.declared import DECODE_CONTROLS, RUN_CONTROLS, Control, decode_config
from core.bench import Progress, sweep_progress
from core.decoder import DecodeConfig
from core.policies import Param
from core.tasks import held_out

MAX_TAUS = 8
MAX_KS = 4
MAX_PROBLEMS = 50
PROBLEMS = Control.of(Param("problems", int, 6, low=1, high=MAX_PROBLEMS, label="held-out prompts",
                            help="held-out prompts of the task, each decoded at every setting"))
DEFAULT_TAUS = "0.1, 0.5, 1, 2, 4"  # across the stories' knee (docs/BENCHMARKS.md)
DEFAULT_KS = "2"
DECODING = ("gen_len", "block_len", "steps", "threshold")  # the decode controls a sweep takes; it decodes greedily
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
    config: DecodeConfig  # greedy decoding, as the bench measures it

    def items(self) -> list:
        task, shots = TASKS[self.task]
        return held_out(task, self.problems, shots=shots)

    def snapshots(self, model, tokenizer, should_stop: Callable[[], bool] = lambda: False) -> Iterator[Progress]:
        """The sweep's progress after each decode (plain data: core.bench.Progress), as the tab runner's
        Job. Stops between two decodes once should_stop() is true."""
        for progress in sweep_progress(model, tokenizer, self.items(), list(self.taus), list(self.ks), self.config):
            yield progress
            if should_stop():
                return


def parse_list(text: object, control: Control, most: int) -> tuple:
    """'0.1, 0.5 1' -> (0.1, 0.5, 1.0): distinct values of `control`, each checked as one sent alone,
    at most `most` of them, in the order given."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Give at least one value for {control.label}.")
    if len(text) > 200:
        raise ValueError(f"The list for {control.label} is too long ({len(text)} characters).")
    values = []
    for item in re.split(r"[,\s]+", text.strip()):
        try:
            number = float(item)
        except ValueError:
            raise ValueError(f"{control.label}: {item!r} is not a number.") from None
        value = control.check(number)
        if value not in values:
            values.append(value)
    if len(values) > most:
        raise ValueError(f"At most {most} values for {control.label}, got {len(values)}.")
    return tuple(values)


def parse_sweep(
    model: object, task: object, taus: object, ks: object, problems: object, gen_len: object, block_len: object,
    steps: object, threshold: object, *, models: list[str], graphs: str = "auto",
) -> SweepParams:
    """Validate one sweep's raw inputs (as the UI or an API client sent them); `graphs`: the server's
    (ModelRegistry.graphs)."""
    if model not in models:
        raise ValueError(f"Unknown model {model!r}; choose one of: {', '.join(models)}.")
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of: {', '.join(TASKS)}.")
    sent = dict(zip(DECODING, (gen_len, block_len, steps, threshold)))
    return SweepParams(
        model=str(model),
        task=str(task),
        taus=parse_list(taus, RUN_CONTROLS["tau"], MAX_TAUS),
        ks=parse_list(ks, RUN_CONTROLS["k"], MAX_KS),
        problems=PROBLEMS.check(problems),
        config=decode_config({key: DECODE_CONTROLS[key].check(value) for key, value in sent.items()}, graphs),
    )


def parse_point(value: object) -> tuple[float, int]:
    """'[tau, k, ...]' as the page sends it -> (tau, k), each checked as one sent alone."""
    tau, k = RUN_CONTROLS["tau"], RUN_CONTROLS["k"]
    data = None
    if isinstance(value, str) and len(value) < 200:
        try:
            data = json.loads(value)
        except json.JSONDecodeError:
            pass  # said below, in words a visitor can act on: not the parser's
    if not isinstance(data, list) or len(data) < 2:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:60] + "..."
        raise ValueError(f"A picked point must be [tau, k], with tau {tau.param.expected(ui=True)} and k "
                         f"{k.param.expected(ui=True)}; got {shown}.")
    return tau.check(data[0]), k.check(data[1])
