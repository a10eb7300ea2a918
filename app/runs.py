"""How a tab's Run handler streams: as the browser session's one run, with plain error messages.

Every tab (Race, Drift, Sweep) runs its stream the same way: the session's run board hands out a
stop flag (a new Run or Stop in any tab cancels the run in flight), a Stop ends with a "Stopped"
output, core's own checks and an out-of-memory become gr.Error with a plain message, and the board
forgets the run however it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import gradio as gr
import torch

from app.sessions import RunBoard, StopFlag


def session_run(
    board: RunBoard, request: gr.Request | None, stream: Callable[[StopFlag], Iterator[tuple]], stopped: tuple,
    oom_message: str,
) -> Iterator[tuple]:
    """Yield what stream(flag) yields, then `stopped` if the run was stopped (not replaced)."""
    # The flag is taken here, once: looked up by session key later, it could be the next run's.
    key, flag = board.begin(getattr(request, "session_hash", None))
    try:
        yield from stream(flag)
        if flag.reason == "stop":  # said last, so no update rendered while stopping can overwrite it
            yield stopped
    except ValueError as e:  # core's own checks (e.g. the prompt does not fit the model)
        raise gr.Error(str(e), print_exception=False) from None
    except torch.OutOfMemoryError:
        raise gr.Error(oom_message, print_exception=False) from None
    finally:
        board.end(key, flag)


@contextmanager
def closed_after(iterator: Iterator) -> Iterator[Iterator]:
    """Like contextlib.closing, for iterators that may lack close() (a wrapped GPU generator, say)."""
    try:
        yield iterator
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
