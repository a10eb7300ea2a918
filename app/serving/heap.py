"""Memory the process freed, given back to the system.

Python returns a freed object's memory to its allocator, not always to the system: after a large trace is
read (its JSON, then its parsed events) or dropped, the process would keep its peak size. glibc's
malloc_trim hands back what its heap no longer uses; elsewhere (another C library, another system)
there is nothing to call, and the collection alone is done. No gradio here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_memory() -> bool:
    """Collect garbage, then trim the C heap where glibc allows it; True if the heap was trimmed."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
