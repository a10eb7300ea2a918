"""GPU plumbing that must work with and without Hugging Face's `spaces` package.

On a ZeroGPU Space, `spaces.GPU` attaches a GPU only while the decorated function runs; elsewhere the
package is absent (or a no-op) and functions run as they are.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import TypeVar

import torch

try:
    import spaces  # type: ignore[import-not-found]
except ImportError:  # not on a Space: nothing to decorate with
    spaces = None

F = TypeVar("F", bound=Callable)
CPU_CONCURRENCY = 2  # the embedded model is small: two races at once share the cores well enough
GPU_DURATION_S = 120  # ZeroGPU's upper bound for one race (the allocation is released when it ends)


def on_gpu(fn: F, duration_s: int = GPU_DURATION_S) -> F:
    """`fn` decorated with spaces.GPU (holding a GPU for at most duration_s) when the package is
    there, else `fn` itself."""
    return spaces.GPU(duration=duration_s)(fn) if spaces is not None else fn


def is_zero_gpu() -> bool:
    return spaces is not None and bool(os.environ.get("SPACES_ZERO_GPU"))


def default_concurrency() -> int:
    """Races at once in this process: 1 on a GPU host, CPU_CONCURRENCY without a GPU.

    Every GPU model is loaded on "cuda", i.e. device 0, whatever the host's GPU count: two races at
    once would share that one device (and skew each other's compute clocks) while other GPUs idle.
    """
    return 1 if torch.cuda.is_available() else CPU_CONCURRENCY


def share_cpu_threads(concurrency: int) -> None:
    """Without a GPU, split the cores between the races that may run at once. Oversubscribed OpenMP
    threads spin against each other, which can make every step many times slower (and noisier)."""
    if not torch.cuda.is_available():
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, concurrency)))


def free_memory() -> None:
    """Return what a finished or cancelled race held (its KV caches) to the allocator and the device."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
