"""When the next render of a running decode is due: the render throttle of the Race and Drift tabs.

Snapshots come after at least `seconds` of wall time spent stepping since the caller last got control
back, and at least four times what the caller took over the last one, so rendering never takes more
than a fifth of a run, however slow a render grows. No gradio here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_THROTTLE_S = 0.25  # at most ~4 renders a second: plotting must not slow the decoders down
DECODE_PER_RENDER = 4.0  # at least this much stepping time per second the caller spends on a snapshot


class Throttle:
    """When the next snapshot is due: once the window has passed since the caller last got control
    back. The window opens after the render, so however slow a render is, decoding comes between two
    of them; it is `seconds`, or DECODE_PER_RENDER times what the caller took over the last snapshot
    if that is longer, so rendering never takes more than a fifth of a run's wall time, however
    costly the plots grow late in a long run. seconds=0: every step is due."""

    def __init__(self, seconds: float, wall_clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds = seconds
        self.wall_clock = wall_clock
        self.window = seconds
        self.opened: float | None = None  # None: the first snapshot is due at once
        self._handed: float | None = None

    def due(self) -> bool:
        return self.opened is None or self.wall_clock() - self.opened >= self.window

    def handing_over(self) -> None:
        """Call right before yielding a snapshot."""
        self._handed = self.wall_clock()

    def rendered(self) -> None:
        """Call when the caller's turn (its render) is over and stepping resumes."""
        self.opened = self.wall_clock()
        if self.seconds > 0 and self._handed is not None:
            self.window = max(self.seconds, DECODE_PER_RENDER * (self.opened - self._handed))
