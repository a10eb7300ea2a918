"""The clock a decode step is timed by, on each kind of device.

On a GPU kernels run asynchronously, so a clock read first waits for the device, and the clock is
wall time. On the CPU the clock is the CPU time of the thread that runs the step
(`time.thread_time`): with nothing else running it equals the step's wall time (to 0.1% on the
embedded model; the OpenMP workers' waits spin on that thread), and unlike wall time it does not
count the moments the thread spent off its core while other processes, or the server's other
threads, ran. What it still counts: its own work slowed by others (shared caches, memory bandwidth),
and the time it spins waiting for an OpenMP worker that was taken off its core. A step runs with
the garbage collector paused, as `timeit` does: a collection walks every object of the process (a
server's, other visitors' traces), so what it costs is not the step's, and it may fall on any step
of either lane. On Windows a thread's CPU time advances only at the scheduler's tick (~16 ms, longer
than a small step), so there the CPU clock is wall time too.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CPU_CLOCK = time.perf_counter if sys.platform == "win32" else time.thread_time


def sync(device: torch.device) -> None:
    """Wait for the device (a no-op on CPU): timings must include the work they time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_clock(device: torch.device) -> float:
    """Seconds on the step clock without waiting for the device: on a GPU, the host's own time issuing
    work (what a step's host-bound parts cost); on the CPU, where work runs as it is issued, clock()."""
    return time.perf_counter() if device.type == "cuda" else CPU_CLOCK()


def clock(device: torch.device) -> float:
    """Seconds on the device's step clock (see above), once the device has finished everything queued."""
    sync(device)
    return host_clock(device)


class Span:
    """The time between two points of a step on the step clock, without waiting for the device at
    either point (a wait there would be a host sync the step does not otherwise need): on a GPU two
    CUDA events, read once the step has waited for the device anyway; on the CPU the thread clock.
    On a GPU it is the device's time from the first point to the second, idle gaps while the host
    issues work included: the span's wall time, once the host has caught up."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._marks = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._marks[0].record()
        else:
            self._times = [CPU_CLOCK(), 0.0]

    def stop(self) -> None:
        if self.cuda:
            self._marks[1].record()
        else:
            self._times[1] = CPU_CLOCK()

    @property
    def seconds(self) -> float:
        """Read after the device has finished the work between the two points."""
        if self.cuda:
            return self._marks[0].elapsed_time(self._marks[1]) / 1000
        return self._times[1] - self._times[0]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it, else every CPU)."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic garbage collection inside (it resumes after, if it was on before)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
