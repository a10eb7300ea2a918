"""Work that the step clock counts: CPU time on the calling thread, unlike a sleep."""

import time


def busy_for(seconds: float) -> None:
    """Work on this thread's CPU for `seconds` of its CPU time (time the step clock counts, unlike a sleep)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
