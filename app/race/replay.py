"""Teaching mode: a recorded race replayed from its events, slowed down, paused, stepped; nothing is
recomputed.

A race's lanes advance on one shared clock of measured compute time (app/race/decode.py). A replay keeps that
clock: its frames are the steps of every lane in the order their compute time ended, and frame n is
shown at wall time (end of its step on the shared clock) x slow-down. So at 1x, 10x and 100x the faster
policy pulls ahead by exactly the measured ratio. "One step per second" is what it says: one frame (one
lane's step, in the shared clock's order) a second, to read each step's story; the faster lane still
takes more of the frames. No gradio here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from app.race.comparison import LaneLabel
from app.race.decode import Lane, Snapshot
from app.race.render import Layout
from app.race.trace_reader import Trace
from app.widgets.text_view import TokenText

STEP_PACE = "one step per second"
PACES = ("1x", "10x", "100x", STEP_PACE)
DEFAULT_PACE = "10x"


class Frame(NamedTuple):
    clock_s: float  # the lane's compute clock when this step ended
    lane: int
    index: int  # the step's index in its lane


@dataclass(frozen=True)
class Replay:
    trace: Trace
    frames: tuple[Frame, ...]  # every lane's steps in the order their compute ended

    @classmethod
    def of(cls, trace: Trace) -> Replay:
        frames = []
        for i, lane in enumerate(trace.lanes):
            clock = 0.0
            for j, event in enumerate(lane.events):
                clock += event.compute_s
                frames.append(Frame(clock, i, j))
        return cls(trace, tuple(sorted(frames)))  # ties: the left lane first, as app/race/decode.py steps it

    def __len__(self) -> int:
        return len(self.frames)

    def layout(self) -> Layout:
        t = self.trace
        s, m = t.settings, t.model
        max_steps = max(s["gen_len"], *(len(lane.events) for lane in t.lanes))
        text = TokenText.from_pieces(m.pieces, m.sep, m.mask_id, m.eos_ids)
        labels = tuple(LaneLabel(lane.side, lane.policy, lane.decoding, lane.tau) for lane in t.lanes)
        return Layout(text, s["gen_len"], max_steps, m.n_layers, len(t.prompt_ids), labels, t.floor_s)

    def counts(self, n: int) -> tuple[int, ...]:
        """How many steps of each lane the first n frames show."""
        n = self.clamp(n)
        shown = [0] * len(self.trace.lanes)
        for frame in self.frames[:n]:
            shown[frame.lane] += 1
        return tuple(shown)

    def snapshot(self, n: int) -> Snapshot:
        """The race as it stood after its first n frames (0: before any step)."""
        n = self.clamp(n)
        lanes = []
        for lane, shown in zip(self.trace.lanes, self.counts(n)):
            events = lane.events[:shown]
            done = shown == len(lane.events)
            lanes.append(Lane(lane.policy, list(events), sum(e.compute_s for e in events), done,
                              lane.finish_rank if done else None))
        stepped = self.frames[n - 1].lane if n else 0
        return Snapshot(tuple(lanes), stepped, n == len(self.frames))

    def clamp(self, n: int) -> int:
        return max(0, min(int(n), len(self.frames)))

    def slowdown(self, pace: str) -> float:
        """Wall seconds per second of compute time at a pace of the compute clock (1x, 10x, 100x)."""
        if pace not in PACES or pace == STEP_PACE:
            raise ValueError(f"A slow-down is one of {', '.join(PACES[:-1])}; got {pace!r}.")
        return float(pace.removesuffix("x"))

    def wall_s(self, n: int, pace: str) -> float:
        """When frame n is shown, in wall seconds from the start of the race, at `pace`: its step's end on
        the shared clock times the slow-down, or n seconds at one step per second."""
        n = self.clamp(n)
        if pace == STEP_PACE:
            return float(n)
        return self.frames[n - 1].clock_s * self.slowdown(pace) if n else 0.0

    def play(
        self, start: int, pace: str, throttle_s: float = 0.0, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep, until: Callable[[], bool] = lambda: False,
    ) -> Iterator[int]:
        """Frame counts from `start` on, each yielded at its wall time (wall_s) as if the race had been
        playing since before `start`; with throttle_s, at most one a throttle_s (frames that fall due
        meanwhile are shown together, as the live race's throttled snapshots). Ends when until() is true
        (checked after every sleep, which may end early: a pause wakes it)."""
        shown = self.clamp(start)
        origin = clock() - self.wall_s(shown, pace)
        last = None
        while shown < len(self.frames) and not until():
            now = clock()
            due = shown
            while due < len(self.frames) and origin + self.wall_s(due + 1, pace) <= now:
                due += 1
            # `last + throttle_s`, as `wake` below: waking at `wake` is late enough even in rounded arithmetic
            if due > shown and (last is None or now >= last + throttle_s):
                shown, last = due, now
                yield shown
                continue
            wake = origin + self.wall_s(shown + 1, pace)
            if last is not None:
                wake = max(wake, last + throttle_s)
            sleep(max(0.0, wake - now))
