"""A fair race between decoders: interleave their step generators on one shared compute clock.

Each lane's clock is the sum of its steps' compute time, which the decoder measures around each
step on its own (on the step clock of core/device.py). The race always advances the lane whose
clock is behind, so the lanes move as if they ran side by side on separate identical devices: the
cheaper decoder visibly pulls ahead and finishes first, and the speedup shown is the measured one.
Time spent here or by the caller between steps (rendering, plotting, network) is never on any clock.

Snapshots come when the render throttle (app/widgets/throttle.py) says one is due, plus one when a
lane finishes and one at the end, so rendering never takes more than a fifth of a run. No gradio here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace

from app.controls.run import Run
from app.serving.closing import close
from app.widgets.throttle import DEFAULT_THROTTLE_S, Throttle
from core.decoder import decode
from core.events import StepEvent
from core.passes import capture_failure
from core.warmup import CAPTURED, capture_ahead, prepared_by
from evaluation.forward_cost import weight_read_floor_s


@dataclass
class Lane:
    name: str
    events: list[StepEvent] = field(default_factory=list)
    clock: float = 0.0  # summed compute_s of the steps taken so far
    done: bool = False
    finish_rank: int | None = None  # 1 for the lane that finished first on the shared clock, once that is sure

    @property
    def last(self) -> StepEvent | None:
        return self.events[-1] if self.events else None

    @property
    def decoded(self) -> int:
        """Positions unmasked by steps so far (not the tail an end-of-text fills in)."""
        return sum(len(e.unmasked) for e in self.events)


@dataclass(frozen=True)
class Snapshot:
    lanes: tuple[Lane, ...]  # copies: a snapshot never changes after it is yielded
    stepped: int  # index of the lane that took the latest step
    finished: bool  # every lane is done
    capture_s: float = 0.0  # CUDA graphs captured before the first step (race_snapshots): on no lane's clock
    floor_s: float | None = None  # on a GPU, reading every weight once (evaluation.forward_cost.weight_read_floor_s)
    graphs_failed: str = ""  # why capturing CUDA graphs failed, once it did: every lane runs eagerly since
    prepared: str = CAPTURED  # what graphs_s paid for (core.warmup.prepared_by)

    @property
    def graphs_s(self) -> float:
        """Every second this race spent capturing CUDA graphs: before its first step, and for a shape
        first needed during it (each step's capture_s, outside its compute_s)."""
        return self.capture_s + sum(lane.last.totals.capture_s for lane in self.lanes if lane.last)


def _copy(lane: Lane) -> Lane:
    return Lane(lane.name, list(lane.events), lane.clock, lane.done, lane.finish_rank)


def race(
    decoders: Sequence[Iterator[StepEvent]],
    names: Sequence[str],
    throttle_s: float = 0.0,
    should_stop: Callable[[], bool] = lambda: False,
    wall_clock: Callable[[], float] = time.perf_counter,
    capture_s: float = 0.0,
    floor_s: float | None = None,
) -> Iterator[Snapshot]:
    """Step the decoders fairly; yield Snapshots. Closing this generator closes every decoder.

    throttle_s=0 yields after every step. `should_stop` is polled before each step: when it turns
    true the race ends without a further snapshot (the caller asked to cancel). `capture_s`: what
    capturing graphs cost before the race, and `floor_s` the device's weight-read floor, told in
    every snapshot.
    """
    if len(decoders) != len(names) or not decoders:
        raise ValueError("one name per decoder, at least one decoder")
    lanes = [Lane(name) for name in names]
    throttle = Throttle(throttle_s, wall_clock)
    try:
        while not all(lane.done for lane in lanes):
            if should_stop():
                return
            i = min((j for j, lane in enumerate(lanes) if not lane.done), key=lambda j: lanes[j].clock)
            just_finished = _advance(lanes[i], decoders[i])
            _rank_finishes(lanes)
            end = all(lane.done for lane in lanes)
            if just_finished or end or throttle.due():
                throttle.handing_over()
                yield Snapshot(tuple(_copy(lane) for lane in lanes), i, end, capture_s, floor_s)
                throttle.rendered()
    finally:
        for d in decoders:
            close(d)


def _rank_finishes(lanes: list[Lane]) -> None:
    """Rank the finished lanes by their clocks, the order they finish in on the shared clock, where that
    is sure: a finished lane no running lane can still beat, as every running lane's clock is already
    at or past its own. (The order lanes take their last steps in is not it: a lane behind by less than
    its last step's cost takes its last step first and can finish later.)"""
    running = min((lane.clock for lane in lanes if not lane.done), default=float("inf"))
    finished = sorted((lane for lane in lanes if lane.done and lane.clock <= running), key=lambda lane: lane.clock)
    for rank, lane in enumerate(finished, 1):
        lane.finish_rank = rank


def _advance(lane: Lane, decoder: Iterator[StepEvent]) -> bool:
    """Take one step of a lane; True if that finished it."""
    event = next(decoder, None)
    if event is None:  # a decoder that ends without a done event still ends
        lane.done = True
        return True
    lane.events.append(event)
    lane.clock += event.compute_s
    lane.done = bool(event.done)
    return lane.done


def race_snapshots(
    model, prompt_ids: list[int], run: Run, throttle_s: float = DEFAULT_THROTTLE_S,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Snapshot]:
    """The run's lanes, each its policy at its settings, on the same prompt ids and seed, raced fairly
    (see race). On the graphed path the passes every lane will need are captured first
    (core.warmup.capture_ahead), so no lane's first steps wait for a capture; a race's length is the
    visitor's, so this is where it can be done, and what it costs is told in the status line, on no
    clock. On a GPU the weight-read floor is measured here, once per device, on no clock either.

    A prompt that leaves no room for gen_len is refused by core's decode (a ValueError) at the first step.
    """
    config, length = run.config, len(prompt_ids) + run.config.gen_len
    captured = capture_ahead(model, length, config.block_size, config.graphs, lanes=len(run.lanes))
    floor_s = weight_read_floor_s(model)
    prepared = prepared_by(model)
    decoders = [decode(model, prompt_ids, lane.policy, lane.config) for lane in run.lanes]
    with closing(race(decoders, [lane.policy.describe() for lane in run.lanes], throttle_s, should_stop,
                      capture_s=captured, floor_s=floor_s)) as snapshots:
        for snap in snapshots:  # a failed capture (core.passes.capture_failure) is said in the status line
            yield replace(snap, graphs_failed=capture_failure(model), prepared=prepared)
