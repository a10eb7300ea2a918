"""A replay playing, as the handlers that stop it see it: the frame it sent last, and a pause that wakes
it at once.

Pause must land on the frame on screen. The client's frame number can lag what it has drawn, and a
frame the playback sends after Pause was pressed would leave "playing" in the banner over a still
screen. So Pause (and any handler that moves the replay) halts the playback itself: it wakes the
playback from its wait, the playback sends nothing more, and only then does the handler read the frame
the playback sent last, which Gradio has already queued before its answer. A playback that ran to its
end is kept until then too: Pause after the last frame says the last frame. No gradio here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

HALT_WAIT_S = 2.0  # how long a handler waits for a playback to notice it was halted
KEPT = 256  # playbacks that ended by themselves kept for a later Pause, the oldest dropped first


class Playback:
    def __init__(self, frame: int) -> None:
        self._lock = threading.Lock()
        self._halted = threading.Event()
        self._ended = threading.Event()
        self.frame = frame  # the frame sent last

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or less if the playback is halted meanwhile."""
        self._halted.wait(seconds)

    def halted(self) -> bool:
        return self._halted.is_set()

    def send(self, frame: int) -> bool:
        """Whether `frame` may be sent (the playback is not halted); if so it is the frame sent last."""
        with self._lock:
            if self._halted.is_set():
                return False
            self.frame = frame
            return True

    def end(self) -> None:
        """The playback sends nothing more (it ran out, was halted, or was closed)."""
        self._ended.set()

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def halt(self) -> int:
        """Stop the playback, wait until it has ended (at most HALT_WAIT_S), and return the frame it sent last."""
        with self._lock:
            self._halted.set()
        self._ended.wait(HALT_WAIT_S)
        return self.frame


class Playbacks:
    """The playback of each replay (by its store key), from its start until a handler moves that replay."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._playing: OrderedDict[str, Playback] = OrderedDict()  # the oldest first

    def start(self, key: str, frame: int) -> Playback:
        """A new playback of replay `key` from `frame`, halting the one that played it before."""
        playback = Playback(frame)
        with self._lock:
            previous = self._playing.pop(key, None)
            self._playing[key] = playback
            ended = [k for k, p in self._playing.items() if p.ended]
            for old in ended[: max(0, len(ended) - KEPT)]:
                del self._playing[old]
        if previous is not None:
            previous.halt()
        return playback

    def halt(self, key: str) -> int | None:
        """Halt replay `key`'s playback; the frame it sent last, or None if it has none."""
        with self._lock:
            playback = self._playing.pop(key, None)
        return None if playback is None else playback.halt()

    def end(self, playback: Playback) -> None:
        """`playback` sends nothing more; it stays, with its last frame, until a handler moves its replay."""
        playback.end()
