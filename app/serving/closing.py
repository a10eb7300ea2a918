"""Closing an iterator that may not be a generator, written once: a decode's generator frees what it
holds (its cache, a GPU's memory) when it is closed, but a run's snapshots may come wrapped (a GPU
worker's stream, a test's plain iterator) in something that has no close(). No gradio here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def close(items: object) -> None:
    """`items.close()`, if it has one."""
    method = getattr(items, "close", None)
    if method is not None:
        method()


@contextmanager
def closed_after(items: Iterator) -> Iterator[Iterator]:
    """Like contextlib.closing, for iterators that may lack close()."""
    try:
        yield items
    finally:
        close(items)
