"""GPU plumbing that must work with and without Hugging Face's `spaces` package.

On a ZeroGPU Space, `spaces.GPU` attaches a GPU only while the decorated function runs; elsewhere the
package is absent (or a no-op) and functions run as they are.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import TypeVar

from core.passes import empty_cuda_cache

try:
    import spaces  # type: ignore[import-not-found]
except ImportError:  # not on a Space: nothing to decorate with
    spaces = None

F = TypeVar("F", bound=Callable)
# Runs admitted at once. They take turns on their device (app/serving/turn_queue.py), so this bounds only how
# many visitors see their place in our line; the rest wait in Gradio's queue, which shows theirs.
CONCURRENCY = 8
GPU_DURATION_S = 120  # ZeroGPU's upper bound for one race (the allocation is released when it ends)


def on_gpu(fn: F, duration_s: int = GPU_DURATION_S) -> F:
    """`fn` decorated with spaces.GPU (holding a GPU for at most duration_s) when the package is
    there, else `fn` itself."""
    return spaces.GPU(duration=duration_s)(fn) if spaces is not None else fn


def is_zero_gpu() -> bool:
    return spaces is not None and bool(os.environ.get("SPACES_ZERO_GPU"))


def free_memory() -> None:
    """Return what a finished or cancelled run held to the allocator and the device: all but its
    workspaces (KV caches, and on a GPU their graphs), which stay with the model for the next decode of
    the same length (core/passes.py)."""
    gc.collect()
    empty_cuda_cache()
