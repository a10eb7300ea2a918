"""Decodes take turns on a device, first come first served.

A race's speedup is the ratio of its lanes' measured compute times. Two decodes running at once on the
same cores (or GPU) inflate each other's step times by however much they overlap, so the ratio a
visitor sees would depend on who else is visiting. So every decode holds its device's TurnQueue while
it steps: each runs as if alone, the numbers it shows are the ones it would show alone, and the
machine does one decode's work at a time at full speed, which is also the highest throughput. A
visitor who waits is told their place in line and an estimate. No gradio here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Ticket:
    """One place in a queue; `held_since` is set when it reaches the head."""

    def __init__(self, record: bool) -> None:
        self.record = record  # count its hold in the estimate (a whole run, not one slice of one)
        self.held_since: float | None = None


class TurnQueue:
    def __init__(self, remember: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._line: deque[Ticket] = deque()  # the head holds the device
        self._holds: deque[float] = deque(maxlen=remember)  # recent runs' hold times, for estimates
        self._clock = clock

    def join(self, record: bool = True) -> Ticket:
        with self._cond:
            ticket = Ticket(record)
            self._line.append(ticket)
            self._promote()
            return ticket

    def wait(self, ticket: Ticket, timeout_s: float) -> bool:
        """Block until `ticket` holds the device (True) or `timeout_s` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._line and self._line[0] is ticket, timeout_s)

    def leave(self, ticket: Ticket) -> None:
        """Give up the place (holding or not); the next in line holds the device."""
        with self._cond:
            if ticket not in self._line:
                return
            if self._line[0] is ticket and ticket.record and ticket.held_since is not None:
                self._holds.append(self._clock() - ticket.held_since)
            self._line.remove(ticket)
            self._promote()
            self._cond.notify_all()

    def ahead(self, ticket: Ticket) -> int:
        """How many are in line before `ticket` (the one holding the device included)."""
        with self._cond:
            return list(self._line).index(ticket) if ticket in self._line else 0

    def estimate_s(self, ticket: Ticket) -> float | None:
        """Seconds until `ticket` holds the device, from recent runs' hold times; None before any."""
        with self._cond:
            if not self._holds or ticket not in self._line:
                return None
            mean = sum(self._holds) / len(self._holds)
            ahead = list(self._line).index(ticket)
            if ahead == 0:
                return 0.0
            head = self._line[0]
            spent = self._clock() - head.held_since if head.held_since is not None else 0.0
            return max(0.0, mean - spent) + mean * (ahead - 1)

    def __len__(self) -> int:
        with self._cond:
            return len(self._line)

    def _promote(self) -> None:
        if self._line and self._line[0].held_since is None:
            self._line[0].held_since = self._clock()


def in_turns(queue: TurnQueue, items: Iterator[T], should_stop: Callable[[], bool], poll_s: float = 0.25
             ) -> Iterator[T]:
    """`items`, each one computed while holding `queue` (a long run, a sweep, takes one turn per item, so
    a race waits for one of its decodes, never for all of them). Ends early when should_stop() is true."""
    while True:
        ticket = queue.join(record=False)
        try:
            while not queue.wait(ticket, poll_s):
                if should_stop():
                    return
            item = next(items, _END)
        finally:
            queue.leave(ticket)
        if item is _END:
            return
        yield item


_END = object()


def waiting_text(ahead: int, estimate_s: float | None) -> str:
    """What a waiting visitor reads: their place and, once there is a history, an estimate."""
    runs = "1 run" if ahead == 1 else f"{ahead} runs"
    about = f", about {estimate_s:.0f} s" if estimate_s is not None else ""
    return (f"Waiting for the model: {runs} ahead of yours{about}. Decodes take turns, so the times you will "
            "see are measured as if yours ran alone.")
