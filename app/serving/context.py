"""What every tab shares: the model registry, the session run board, the compute queues, the render
throttle, the warm-up.

One AppContext per app (app/ui.py builds it); each tab's handlers take it, never another tab's
handlers. A Run or Stop in any tab acts on the browser session's one run (app/serving/sessions.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from app.serving.admission import Admission
from app.serving.registry import ModelChoice, ModelRegistry
from app.serving.sessions import RunBoard
from app.serving.turn_queue import TurnQueue
from app.widgets.banner import STOPPED
from app.widgets.throttle import DEFAULT_THROTTLE_S
from core.config import DecodeConfig
from core.decoder import decode
from core.few_rows import few_rows_state
from core.loading import chat_prompt_ids
from core.policies import make_policy
from core.warmup import capture_ahead, prepared_by
from evaluation.forward_cost import weight_read_floor_s


@dataclass(frozen=True)
class WarmShape:
    """A race the warm-up readies ahead (warm_up): on the model's example `example` picks, at its lengths,
    with its lanes. The Race tab hands the context the one a visitor finds on the page."""

    example: Callable[[ModelChoice], int]  # the index of the model's example the race decodes
    gen_len: int
    block_len: int
    lanes: int


class AppContext:
    def __init__(self, registry: ModelRegistry, board: RunBoard | None = None,
                 throttle_s: float = DEFAULT_THROTTLE_S, proxied: bool | None = None) -> None:
        self.registry = registry
        self.board = RunBoard() if board is None else board  # `or` would not do: an empty board is falsy
        self.throttle_s = throttle_s
        self.admission = Admission()  # one decoding and one waiting run per visitor per tab
        self.proxied = proxied  # whether a visitor is read from X-Forwarded-For (None: app/serving/admission.py says)
        # Whether a session's reader has gone (app/serving/listener.py); the app sets it once it has a queue.
        self.forgotten: Callable[[str | None], bool] = lambda session: False
        self._warm: weakref.WeakSet = weakref.WeakSet()  # models that have run once in this process
        self._queues = {"cpu": TurnQueue(), "cuda": TurnQueue()}  # decodes take turns per device, round robin
        self.warm_shapes: tuple[WarmShape, ...] = ()  # the races a warm-up readies ahead (the Race tab sets them)

    def turn_queue(self, device: str) -> TurnQueue:
        """The queue of the device a model runs on ('cpu' or 'cuda'): one decode at a time on it."""
        return self._queues[device]

    def load_warm(self, choice: ModelChoice) -> tuple[object, object]:
        """(model, tokenizer) of a run's model (looked up once: ModelRegistry.choice), warmed up once per
        process (see warm_up)."""
        model, tokenizer = self.registry.load(choice)
        if model not in self._warm:
            captured = warm_up(model, tokenizer, choice, self.registry.graphs, self.warm_shapes)
            if captured:
                print(f"warm-up: {prepared_by(model)} for {choice.label} in {captured:.2f} s; passes over few "
                      f"rows: {few_rows_state(model)}", flush=True)
            self._warm.add(model)
        return model, tokenizer

    def cancel_previous(self, request: gr.Request = None) -> None:
        """Runs before a new Run is queued, so a run in flight stops even while the new one waits for a slot."""
        self.board.cancel(getattr(request, "session_hash", None), reason="replaced")

    def stop(self, request: gr.Request = None) -> str:
        """Every tab's Stop: the session's run ends within one step; returns the banner that says so."""
        # Gradio's own cancel (cancels=[run_event]) may already have closed the run; the flag covers a
        # run caught mid-step, which Gradio cannot close, and a ZeroGPU worker, which closing does not stop.
        self.board.cancel(getattr(request, "session_hash", None))
        return STOPPED


def warm_up(model, tokenizer, choice: ModelChoice, graphs: str, shapes: tuple[WarmShape, ...] = ()) -> float:
    """One tiny decode (a full step, then a partial one), so that one-time costs (allocations, kernel
    selection, lazily built tables) land on no run's clock: the lane stepped first would pay them.
    Its prompt is a few arbitrary token ids: what they say does not matter, and no text is needed
    that every tokenizer can read. On a GPU the copy bandwidth behind the race's weight-read floor is
    measured now too. Then, on the graphed path, the CUDA graphs each race of `shapes` needs (the
    Race's opening, on the model's long example) are captured, one set per lane, so that race starts
    at once; returns the seconds that took (0 where nothing is captured). An example the model's
    tokenizer cannot read (a model in a family's layout with a tokenizer of its own) is no reason to
    refuse the visitor's prompt: nothing is captured ahead for it then."""
    ids = [0] * 8
    policy = make_policy("entropy", tau=float("inf"))
    for _ in decode(model, ids, policy, DecodeConfig(gen_len=8, block_len=8, steps=2, graphs=graphs)):
        pass
    weight_read_floor_s(model)
    if not choice.example_list:
        return 0.0
    return sum((_capture(model, tokenizer, choice, graphs, shape) for shape in shapes), 0.0)


def _capture(model, tokenizer, choice: ModelChoice, graphs: str, shape: WarmShape) -> float:
    """The passes a race of `shape` on `choice`'s example needs, captured ahead (core.warmup.capture_ahead)."""
    try:
        length = len(chat_prompt_ids(tokenizer, choice.examples[shape.example(choice)])) + shape.gen_len
    except ValueError:
        return 0.0
    return capture_ahead(model, length, shape.block_len, graphs, lanes=shape.lanes)
