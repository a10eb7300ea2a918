"""One decode step's time on the step clock (core/device.py), and its parts as a StepEvent reports them.

A step is timed from before its plan to after the policy observed its outcome: compute_s. Its three
parts add up to it: the model's pass (forward_s: without the graphs captured or passes compiled on
their first use, which are capture_s and no step's time, and without a layer hook's signals, which
are the decision's), the policy's decision (decision_s: planning, observing, the entropies of the
decoded tokens, a layer hook's signals), and the rest, which is the token choice (choice_s:
sampling, writing and reading back the tokens, and the step's bookkeeping).

The clock is read where the step waits for the device anyway (before the plan, after it, once the
tokens are read back, at the end): timing a step adds no wait of the host for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

from core.device import Span, clock, host_clock
from core.exact_passes import Passes
from core.layerwise import LayerHook

T = TypeVar("T")


class StepTimes(NamedTuple):
    """A step's seconds, as the StepEvent fields of the same names."""

    compute_s: float  # forward_s + choice_s + decision_s
    forward_s: float
    choice_s: float
    decision_s: float
    capture_s: float  # paid once per length and shape, on first use: not in compute_s


class StepClock:
    """Marks along one step, in its order: made before the plan, `planned`, the `forward` timed,
    anything the decision issues with the readout `on_host`, `read_out` once the device is done, and
    `stop` after the policy observed."""

    def __init__(self, passes: Passes) -> None:
        self.device = passes.device
        self.passes = passes
        self.captured = passes.capture_s  # what the passes spent capturing or compiling before this step
        self.decision_s = 0.0
        self.forward_span: Span | None = None
        self.read_at = 0.0
        self.started = clock(self.device)  # CPU time of this thread on a CPU, synchronised wall time on a GPU

    def planned(self) -> None:
        """The plan is made: its time is the decision's."""
        self.decision_s += clock(self.device) - self.started

    def forward(self, run: Callable[..., T], *args: object) -> T:
        """run(*args), the model's pass, timed without waiting for the device."""
        self.forward_span = Span(self.device)
        out = run(*args)
        self.forward_span.stop()
        return out

    def on_host(self, issue: Callable[[], T]) -> T:
        """issue(), decision work the host issues with the token choice (one readout for both): the
        host's time issuing it is the decision's."""
        started = host_clock(self.device)
        out = issue()
        self.decision_s += host_clock(self.device) - started
        return out

    def read_out(self) -> None:
        """The device is done: what the step does from here to `stop` is the decision's."""
        self.read_at = clock(self.device)

    def stop(self, hook: LayerHook | None) -> StepTimes:
        """The step's times, `hook` being the plan's layer hook (its signals were measured inside the forward)."""
        ended = clock(self.device)
        signal_s = 0.0 if hook is None else hook.signal_s
        decision_s = self.decision_s + (ended - self.read_at) + signal_s
        capture_s = self.passes.capture_s - self.captured
        compute_s = ended - self.started - capture_s
        forward_s = min(max(0.0, self.forward_span.seconds - capture_s - signal_s), compute_s - decision_s)
        return StepTimes(compute_s, forward_s, compute_s - forward_s - decision_s, decision_s, capture_s)
