"""Whether anyone still reads a run's answers.

Gradio keeps a request's updates in its session's message queue until a client reads them (the page's
stream, or GET /call/<api>/<event_id>). A client that never reads (a request sent and forgotten) or has
gone leaves them piling up there: the run would decode to its end for nobody while its frames fill the
server's memory. So a run whose session holds more than MAX_UNREAD unread updates is stopped at its
next step. A page that reads its stream keeps that queue nearly empty.

This reads Gradio's queue (Blocks._queue.pending_messages_per_session), which it does not document;
where that is missing, every run counts as read.
"""

from __future__ import annotations

from collections.abc import Callable

MAX_UNREAD = 16  # updates a session may leave unread before its run stops: a few seconds of a race's


def unread(blocks: object, session: str | None) -> int:
    """How many updates of `session` wait in `blocks`' queue unread (0 where that cannot be told)."""
    pending = getattr(getattr(blocks, "_queue", None), "pending_messages_per_session", None)
    messages = pending.get(session) if hasattr(pending, "get") and session else None  # a mapping (an LRU cache)
    qsize = getattr(messages, "qsize", None)
    return qsize() if callable(qsize) else 0


def unread_check(blocks: object) -> Callable[[str | None], bool]:
    """A check for the runner: True when a session's reader has fallen MAX_UNREAD updates behind."""
    return lambda session: unread(blocks, session) > MAX_UNREAD
