"""How many threads a CPU pass runs on: the cores that no other process is using, as measured while
the decode runs.

A pass's OpenMP team meets at a barrier after every kernel, so one thread that shares its core with
another process makes the whole team wait for it at every barrier: on 2 cores with one held by a
spinning process, a 2-thread team ran a full pass 8x slower and an 18-row pass 25x slower than idle,
while 1 thread ran both at its idle speed (docs/BENCHMARKS.md, "A busy core"). Small passes suffer
most (more barriers per unit of work), so a busy core cut EntropyCache's speedup by more than half.

So a decode's team is sized from the machine's load: every `INTERVAL_S` it reads how much CPU time the
other processes used since the last reading (Linux's /proc/stat less this process's own time, from
/proc/self/stat), and runs on its `most` threads less the cores they kept busy. Elsewhere (no /proc)
the team stays at `most`. The thread count changes how BLAS splits a product, so logits move by float
rounding from one team size to another; on the embedded model the tokens do not
(tests/core/test_threads.py), but a decode on a busy machine is not promised bit for bit what it is on
an idle one. ENTROPYCACHE_ADAPTIVE_THREADS=0 keeps the team at `most` (the test suite sets it, so that
no test's tokens depend on what else the machine runs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

INTERVAL_S = 0.5  # how often the load is read: a pass lasts milliseconds, a busy process seconds
BUSY = 0.3  # of a core's time used by others over an interval, from which that core counts as taken
ADAPTIVE = os.environ.get("ENTROPYCACHE_ADAPTIVE_THREADS", "1") != "0"
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read_cpu_ticks() -> tuple[int, int] | None:
    """(ticks every CPU spent busy, ticks this process used), or None where /proc does not say."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal: guests are in user
    return busy, int(own[11]) + int(own[12])  # utime, stime


class CoreLoad:
    """The cores other processes keep busy, measured between two readings of the CPU tick counters."""

    def __init__(self, read: Callable[[], tuple[int, int] | None] = read_cpu_ticks,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._read, self._now = read, now
        self._last = (now(), read())

    def others(self) -> float | None:
        """Cores' worth of CPU time other processes used since the last call (or since made); None
        where it cannot be read."""
        then, before = self._last
        self._last = now, after = self._now(), self._read()
        if before is None or after is None or now <= then:
            return None
        others = (after[0] - before[0]) - (after[1] - before[1])
        return max(0.0, others / TICKS / (now - then))


class ThreadTeam:
    """A process's CPU decodes' OpenMP team: as many threads as torch was set to use (`most`: app.py
    --threads, a script's torch.set_num_threads), less the cores others keep busy."""

    def __init__(self, load: CoreLoad | None = None, now: Callable[[], float] = time.monotonic,
                 adaptive: bool = ADAPTIVE) -> None:
        self.adaptive = adaptive
        self._load = load or CoreLoad(now=now)
        self._now = now
        self._next = now() + INTERVAL_S
        self._set: int | None = None  # the size this team last gave torch
        self.most = self.size = torch.get_num_threads()

    def fit(self) -> int:
        """The team's size for the next pass, re-measured every INTERVAL_S. Call it from the thread that
        runs the passes (OpenMP's team size is the calling thread's)."""
        current = torch.get_num_threads()
        if current != self._set:  # set by someone else since: that is the most to use
            self.most = self.size = current
        if self.adaptive and self._now() >= self._next:
            self._next = self._now() + INTERVAL_S
            others = self._load.others()
            taken = 0 if others is None else int(others + 1 - BUSY)
            self.size = max(1, self.most - taken)
        if current != self.size:
            torch.set_num_threads(self.size)
        self._set = self.size
        return self.size


TEAM = ThreadTeam()  # every CPU decode of the process: one team, as PyTorch's is one per process
