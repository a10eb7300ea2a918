"""The Sweep tab's decoding half: a tau x k sweep request checked and built, run decode by decode, and
a picked point read back.

A sweep is evaluation.bench's: the exact decoder and EntropyCache at every (tau, k) of the grid decode the
same prompts, interleaved: the held-out items of one task (stories, or word problems alone or after
worked examples) or the visitor's own prompts, one a line. Each point is a bench row (speedup,
accuracy, agreement, first divergence, ..., and what it decoded for every prompt). Every list, count
and prompt a visitor sends is bounded here, by the controls' declared ranges (app/controls/declared.py)
and the Race's prompt check, since the HTTP API accepts anything; nothing is clamped silently, and a
bad prompt's message names its line. No gradio here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from app.controls.declared import DECODE_CONTROLS, RUN_CONTROLS, Control, decode_config
from app.controls.run import MAX_PROMPT_CHARS, check_prompt
from app.serving.sent import check_choice
from core.config import DecodeConfig
from core.policies import Param
from core.refusal import shown
from evaluation.bench import Progress, sweep_progress
from evaluation.tasks import Item, held_out, own_items, prompt_lines

MAX_TAUS = 8
MAX_KS = 4
MAX_PROBLEMS = 50
MAX_OWN_PROMPTS = 20
MAX_LIST_CHARS = 200  # a tau or k list
PLAIN_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # what a list's value may be written as
MAX_BOX_CHARS = MAX_OWN_PROMPTS * (MAX_PROMPT_CHARS + 1)  # the prompts box: every line as long as the Race's prompt
PROBLEMS = Control.of(Param("problems", int, 6, low=1, high=MAX_PROBLEMS, label="held-out prompts",
                            help="held-out prompts of the task, each decoded at every setting"))
DEFAULT_TAUS = "0.1, 0.5, 1, 2, 4"  # across the stories' knee (docs/BENCHMARKS.md)
DEFAULT_KS = "2"
# The decode controls a sweep takes. It decodes greedily but where its model declares other settings for
# the task of its held-out items (ModelConfig.task_settings: the embedded model samples its stories).
DECODING = ("gen_len", "block_len", "steps", "threshold", "top_p", "top_k", "alg", "schedule")
# What a visitor picks -> (evaluation.tasks task, worked examples before each problem). Stories first: they
# have real choices, so tau changes what is recomputed; word problems are nearly certain everywhere.
TASKS = {"stories": ("stories", 0), "word problems": ("words", 0), "word problems, 4-shot": ("words", 4)}
OWN_PROMPTS = "your prompts"  # the other choice: the prompts box, one prompt a line
SOURCES = [*TASKS, OWN_PROMPTS]
# What a sweep is sent besides its DECODING controls, by the names the HTTP API gives them (parse_sweep).
SWEEP_INPUTS = ("model", "task", "prompts", "taus", "ks", "scope", "problems")


@dataclass(frozen=True)
class SweepParams:
    model: str
    task: str  # one of SOURCES
    taus: tuple[float, ...]
    ks: tuple[int, ...]
    problems: int  # held-out items of a task
    config: DecodeConfig  # from the sweep's controls (decode_config says how the model's declared settings join)
    prompts: tuple[tuple[int, str], ...] = ()  # OWN_PROMPTS: (line, prompt) for each line that is not blank
    scope: str = "block"  # EntropyCache's masked rows at every point: the block's or the response's

    def items(self) -> list[Item]:
        if self.task == OWN_PROMPTS:
            return own_items([prompt for _, prompt in self.prompts])
        task, shots = TASKS[self.task]
        return held_out(task, self.problems, shots=shots)

    @property
    def count(self) -> int:
        """How many prompts the sweep decodes at every setting."""
        return len(self.prompts) if self.task == OWN_PROMPTS else self.problems

    @property
    def decodes(self) -> int:
        """How many decodes the sweep runs: the exact decoder's and every (tau, k)'s, for every prompt."""
        return self.count * self.settings

    @property
    def settings(self) -> int:
        """The settings each prompt is decoded at: the exact decoder, then every (tau, k)."""
        return 1 + len(self.taus) * len(self.ks)

    def name(self, i: int) -> str:
        """How a message names the sweep's i-th prompt (from 0)."""
        return f"Line {self.prompts[i][0]} of your prompts" if self.task == OWN_PROMPTS else f"Held-out prompt {i + 1}"

    def decode_config(self, model_config) -> DecodeConfig:
        """The sweep's settings, with what the model declares for its held-out items' task where the
        sweep has no control of its own (as `bench --task` decodes them); your prompts as they are."""
        if self.task == OWN_PROMPTS:
            return self.config
        # an unset one (None) is the model's declared setting, else DecodeConfig's (Dream's top_p 0.9 stays)
        own = {key: getattr(self.config, key) for key in DECODING if getattr(self.config, key) is not None}
        return DecodeConfig.for_model(model_config, task=TASKS[self.task][0], graphs=self.config.graphs, **own)

    def snapshots(self, model, tokenizer, should_stop: Callable[[], bool] = lambda: False,
                  prompt_ids: Sequence[Sequence[int]] | None = None) -> Iterator[Progress]:
        """The sweep's progress after each decode (plain data: evaluation.bench.Progress). Stops between two
        decodes once should_stop() is true. `prompt_ids`: each prompt's, tokenized already (None: here)."""
        config = self.decode_config(model.config)
        for progress in sweep_progress(model, tokenizer, self.items(), list(self.taus), list(self.ks), config,
                                       scope=self.scope, prompt_ids=prompt_ids):
            yield progress
            if should_stop():
                return


@dataclass(frozen=True)
class SweepJob:
    """A sweep as its device decodes it (the tab runner's Job): plain data, every prompt's ids tokenized
    once, when the sweep was checked (or, for a model not loaded then, when it was)."""

    params: SweepParams
    prompt_ids: tuple[tuple[int, ...], ...]  # in the order of params.items()

    def snapshots(self, model, tokenizer, should_stop: Callable[[], bool] = lambda: False) -> Iterator[Progress]:
        return self.params.snapshots(model, tokenizer, should_stop, self.prompt_ids)


def parse_list(text: object, control: Control, most: int) -> tuple:
    """'0.1, 0.5 1' -> (0.1, 0.5, 1.0): distinct values of `control`, separated by commas or spaces,
    each checked as one sent alone, at most `most` of them, in the order given. Each is a plain
    decimal (PLAIN_NUMBER): no empty value between two commas, no '1_0', '-0', nan or inf, which
    Python's float() would read as something the visitor may not have meant."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Give at least one value for {control.label}.")
    if len(text) > MAX_LIST_CHARS:
        raise ValueError(f"The list for {control.label} is too long ({len(text)} characters; at most "
                         f"{MAX_LIST_CHARS}).")
    values = []
    for item in re.split(r"\s*,\s*|\s+", text.strip()):
        value = control.check(_plain_number(item, control))
        if value not in values:
            values.append(value)
    if len(values) > most:
        raise ValueError(f"At most {most} values for {control.label}, got {len(values)}.")
    return tuple(values)


def _plain_number(item: str, control: Control) -> float:
    if not item:
        raise ValueError(f"{control.label}: a value is missing between two commas.")
    if not PLAIN_NUMBER.fullmatch(item):
        raise ValueError(f"{control.label}: {shown(item)} is not a number (write each value plainly, like 0.5 or 2).")
    number = float(item)
    if number == 0 and item.startswith("-"):
        raise ValueError(f"{control.label}: {shown(item)} is not a value of its own: write 0.")
    return number


def parse_prompts(text: object) -> tuple[tuple[int, str], ...]:
    """The prompts box: (line, prompt) for each line that is not blank (evaluation.tasks.prompt_lines, as
    `bench --prompts FILE` reads a file), at most MAX_OWN_PROMPTS, each checked as the Race's prompt is,
    a message naming its line. (Whether the model can read them is the registry's check: app/sweep/tab.py.)"""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Type or paste your prompts, one per line (at most {MAX_OWN_PROMPTS}): the box is empty.")
    if len(text) > MAX_BOX_CHARS:
        raise ValueError(f"Your prompts are {len(text)} characters long; the limit is {MAX_BOX_CHARS}.")
    lines = prompt_lines(text)
    if len(lines) > MAX_OWN_PROMPTS:
        raise ValueError(f"At most {MAX_OWN_PROMPTS} prompts, one per line; got {len(lines)}.")
    for n, prompt in lines:
        try:
            check_prompt(prompt)
        except ValueError as e:
            raise ValueError(f"Line {n} of your prompts: {e}") from None
    return tuple(lines)


def parse_sweep(sent: Mapping[str, object], *, models: Sequence[str], graphs: str = "auto") -> SweepParams:
    """Validate one sweep's raw inputs, by name, as the UI or an API client sent them: SWEEP_INPUTS and
    the DECODING controls (a decode control not sent is at its default, and so is EntropyCache's `scope`,
    its masked rows at every point). `graphs`: the server's (ModelRegistry.graphs). The prompts box is
    read only when the task is OWN_PROMPTS."""
    model, task = check_choice(sent.get("model"), models, "model"), check_choice(sent.get("task"), SOURCES, "task")
    unknown = sorted(set(sent) - set(SWEEP_INPUTS) - set(DECODING))
    if unknown:
        raise ValueError(f"the sweep has no control {shown(unknown[0])} (its decoding: {', '.join(DECODING)})")
    return SweepParams(  # checked in this order: the first bad input is the one told
        model=model,
        task=task,
        taus=parse_list(sent.get("taus"), RUN_CONTROLS["tau"], MAX_TAUS),
        ks=parse_list(sent.get("ks"), RUN_CONTROLS["k"], MAX_KS),
        problems=PROBLEMS.check(sent.get("problems")),
        config=decode_config(_decoding(sent), graphs),
        prompts=parse_prompts(sent.get("prompts")) if task == OWN_PROMPTS else (),
        scope=RUN_CONTROLS["scope"].check(sent.get("scope", RUN_CONTROLS["scope"].default)),
    )


def _decoding(sent: Mapping[str, object]) -> dict[str, int | float | str]:
    """The DECODING controls sent, each checked (one not sent: at its control's default)."""
    return {key: DECODE_CONTROLS[key].check(sent.get(key, DECODE_CONTROLS[key].default)) for key in DECODING}


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
