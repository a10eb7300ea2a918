"""Decodes take turns on a device, round robin across visitors.

A race's speedup is the ratio of its lanes' measured compute times. Two decodes running at once on the
same cores (or GPU) inflate each other's step times by however much they overlap, so the ratio a
visitor sees would depend on who else is visiting. So every decode holds its device's TurnQueue while
it steps: each runs as if alone, the numbers it shows are the ones it would show alone, and the
machine does one decode's work at a time at full speed, which is also the highest throughput. A
visitor who waits is told their place in line and an estimate.

The next turn goes to the next visitor in rotation, not to the oldest ticket: a visitor with many
tickets (a sweep's decodes, many runs sent at once) takes one turn per round, so every other
visitor's run waits for at most one turn of theirs. A ticket without a visitor is a visitor of its
own (first come, first served among those). No gradio here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Ticket:
    """One place in a queue; `held_since` is set when it gets the device."""

    def __init__(self, record: bool, visitor: Hashable | None) -> None:
        self.record = record  # count its hold in the estimate (a whole run, not one slice of one)
        self.visitor = self if visitor is None else visitor  # whose turn it takes in the rotation
        self.held_since: float | None = None


class TurnQueue:
    def __init__(self, remember: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._holder: Ticket | None = None  # the ticket that holds the device
        self._waiting: list[Ticket] = []  # in the order they joined
        self._rotation: list[Hashable] = []  # visitors with waiting tickets, the next to hold the device first
        self._holds: deque[float] = deque(maxlen=remember)  # recent runs' hold times, for estimates
        self._clock = clock

    def join(self, record: bool = True, visitor: Hashable | None = None) -> Ticket:
        with self._cond:
            ticket = Ticket(record, visitor)
            self._waiting.append(ticket)
            self._enter_rotation(ticket.visitor)
            self._promote()
            return ticket

    def wait(self, ticket: Ticket, timeout_s: float) -> bool:
        """Block until `ticket` holds the device (True) or `timeout_s` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._holder is ticket, timeout_s)

    def leave(self, ticket: Ticket) -> None:
        """Give up the place (holding or not); the next in the rotation holds the device."""
        with self._cond:
            if ticket is self._holder:
                if ticket.record:
                    self._holds.append(self._clock() - ticket.held_since)
                self._holder = None
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
                if not any(t.visitor == ticket.visitor for t in self._waiting):
                    self._rotation.remove(ticket.visitor)
            else:
                return
            self._promote()
            self._cond.notify_all()

    def ahead(self, ticket: Ticket) -> int:
        """How many turns come before `ticket`'s (the one holding the device included)."""
        with self._cond:
            order = self._order()
            if ticket not in order:
                return 0
            return order.index(ticket) + (self._holder is not None)

    def estimate_s(self, ticket: Ticket) -> float | None:
        """Seconds until `ticket` holds the device, from recent runs' hold times; None before any."""
        with self._cond:
            if not self._holds or (ticket is not self._holder and ticket not in self._waiting):
                return None
            if ticket is self._holder:
                return 0.0
            mean = sum(self._holds) / len(self._holds)
            spent = self._clock() - self._holder.held_since if self._holder is not None else mean
            return max(0.0, mean - spent) + mean * self._order().index(ticket)

    def __len__(self) -> int:
        with self._cond:
            return len(self._waiting) + (self._holder is not None)

    def _order(self) -> list[Ticket]:
        """The waiting tickets in the order they will hold the device: visitors in rotation, one ticket
        (their oldest) a turn; a visitor goes to the back of the rotation after each turn."""
        queues: dict[Hashable, deque[Ticket]] = {}
        for ticket in self._waiting:
            queues.setdefault(ticket.visitor, deque()).append(ticket)
        rotation, order = deque(self._rotation), []
        while rotation:
            visitor = rotation.popleft()
            order.append(queues[visitor].popleft())
            if queues[visitor]:
                rotation.append(visitor)
        return order

    def _enter_rotation(self, visitor: Hashable) -> None:
        """A visitor with a first waiting ticket joins the rotation at its back, but before the visitor who
        holds the device now: that one has had its turn."""
        if visitor in self._rotation:
            return
        current = self._holder.visitor if self._holder is not None else None
        at = self._rotation.index(current) if current != visitor and current in self._rotation else len(self._rotation)
        self._rotation.insert(at, visitor)

    def _promote(self) -> None:
        if self._holder is None and self._waiting:
            self._holder = self._order()[0]
            self._waiting.remove(self._holder)
            self._holder.held_since = self._clock()
            self._rotation.remove(self._holder.visitor)
            if any(t.visitor == self._holder.visitor for t in self._waiting):
                self._rotation.append(self._holder.visitor)


def in_turns(queue: TurnQueue, items: Iterator[T], should_stop: Callable[[], bool], poll_s: float = 0.25,
             visitor: Hashable | None = None) -> Iterator[T]:
    """`items`, each one computed while holding `queue` (a long run, a sweep, takes one turn per item, so
    a race waits for one of its decodes, never for all of them), each turn `visitor`'s. Ends early when
    should_stop() is true."""
    while True:
        ticket = queue.join(record=False, visitor=visitor)
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
