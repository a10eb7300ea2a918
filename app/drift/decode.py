"""The diagnostic decode behind the Drift tab: the picked policy with evaluation's Probe hook, as snapshots.

`drift_snapshots` is the only part that touches the model (on a GPU it runs inside the GPU
allocation) and yields plain data: the events so far. No gradio here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.controls.run import Run
from app.widgets.throttle import DEFAULT_THROTTLE_S, Throttle
from core.decoder import decode
from core.events import StepEvent
from evaluation.diagnostics import Probe


@dataclass(frozen=True)
class DriftSnapshot:
    events: tuple[StepEvent, ...]  # every event so far (a snapshot never changes after it is yielded)
    finished: bool  # the decode ran to its last step


def drift_snapshots(
    model, prompt_ids: list[int], run: Run, throttle_s: float = DEFAULT_THROTTLE_S,
    should_stop: Callable[[], bool] = lambda: False, wall_clock: Callable[[], float] = time.perf_counter,
) -> Iterator[DriftSnapshot]:
    """The run's policy (the one picked) with a Probe; a snapshot after each `throttle_s` of
    stepping (app/widgets/throttle.py) and at the end.

    `should_stop` is polled before each step: when it turns true the decode ends without a further snapshot."""
    decoder = decode(model, prompt_ids, run.policies[0], run.config, before_step=Probe(model))
    events: list[StepEvent] = []
    throttle = Throttle(throttle_s, wall_clock)
    try:
        while not should_stop():
            event = next(decoder, None)
            if event is None:
                if events and not events[-1].done:  # a decoder that ends without a done event still ends
                    yield DriftSnapshot(tuple(events), True)
                return
            events.append(event)
            if event.done or throttle.due():
                throttle.handing_over()
                yield DriftSnapshot(tuple(events), bool(event.done))
                throttle.rendered()
            if event.done:
                return
    finally:
        decoder.close()
