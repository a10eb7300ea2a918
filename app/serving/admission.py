"""Who may queue how much: at most one run decoding and one waiting per visitor per tab, and a bound
on Gradio's own queue.

A visitor is a client address, not a browser session: a client that sends many requests can give each
a new session, not a new address. Behind a Space's proxy every request comes from the proxy, so there
the address is the last one the proxy added to X-Forwarded-For (the earlier entries are the client's
own, and could be anything); elsewhere the connection's address, unless the operator says the server
sits behind a proxy (ENTROPYCACHE_BEHIND_PROXY=1). Visitors behind one address (a classroom behind one
router) share its two places. A run that replaces the same session's run in flight (a new Run) takes
that run's place. No gradio here (a request is read by its attributes).
"""

from __future__ import annotations

import os
import threading

PER_VISITOR = 2  # runs under way per visitor per tab: one decoding, one waiting for its turn
MAX_QUEUED = 64  # requests Gradio's queue holds before answering "queue full" (its max_size)
PROXY_ENV = "ENTROPYCACHE_BEHIND_PROXY"
BUSY = (f"You already have {PER_VISITOR} runs under way in this tab (one decoding, one waiting for its turn): "
        "wait for one to finish, or press Stop.")


def behind_proxy() -> bool:
    """Whether requests reach the server through a proxy that names the client in X-Forwarded-For."""
    return bool(os.environ.get("SPACE_ID")) or os.environ.get(PROXY_ENV) == "1"


def visitor_of(request: object, proxied: bool | None = None) -> str:
    """The client address a request came from (see the module's docstring); '' when it has none."""
    proxied = behind_proxy() if proxied is None else proxied
    headers = getattr(request, "headers", None) or {}
    forwarded = headers.get("x-forwarded-for", "") if proxied else ""
    if forwarded:
        return forwarded.split(",")[-1].strip()
    client = getattr(request, "client", None)
    return str(getattr(client, "host", "") or "")


class Admission:
    """The runs under way, per (tab, visitor): each one's session."""

    def __init__(self, per_visitor: int = PER_VISITOR) -> None:
        self.per_visitor = per_visitor
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], list[str | None]] = {}

    def enter(self, tab: str, visitor: str, session: str | None) -> tuple[str, str, str | None]:
        """Take one of the visitor's places in `tab` for a run of `session` (give it back with leave),
        or raise a ValueError (BUSY) when runs of other sessions hold them all."""
        with self._lock:
            runs = self._runs.setdefault((tab, visitor), [])
            if sum(s is None or s != session for s in runs) >= self.per_visitor:
                raise ValueError(BUSY)
            runs.append(session)
        return tab, visitor, session

    def leave(self, place: tuple[str, str, str | None]) -> None:
        tab, visitor, session = place
        with self._lock:
            runs = self._runs[(tab, visitor)]
            runs.remove(session)
            if not runs:
                del self._runs[(tab, visitor)]

    def under_way(self, tab: str, visitor: str) -> int:
        with self._lock:
            return len(self._runs.get((tab, visitor), ()))
