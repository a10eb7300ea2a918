"""One run per browser session: a new Run or a Stop cancels the session's run in flight.

Gradio's own cancellation cannot interrupt a step that is executing, so each run also polls a flag
between steps; setting it ends both decoders at once, within one step. A run holds on to the flag
object `begin` gave it: a flag looked up later by session key could be its successor's.
"""

from __future__ import annotations

import threading
import uuid


class StopFlag(threading.Event):
    """A run's stop flag, with why it was set: 'stop' (the Stop button) or 'replaced' (a new Run)."""

    reason = ""

    def stop(self, reason: str) -> None:
        self.reason = reason
        self.set()


class RunBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, StopFlag] = {}

    def begin(self, session: str | None) -> tuple[str, StopFlag]:
        """Register a new run for `session`, cancelling the one it replaces. Returns (key, stop flag)."""
        key = session or f"anonymous-{uuid.uuid4().hex}"  # no session: nothing to share a flag with
        flag = StopFlag()
        with self._lock:
            old = self._runs.get(key)
            if old is not None:
                old.stop("replaced")
            self._runs[key] = flag
        return key, flag

    def cancel(self, session: str | None, reason: str = "stop") -> bool:
        """Stop the session's run in flight; True if there was one. (It stays registered, flagged, until it ends.)"""
        with self._lock:
            flag = self._runs.get(session) if session else None
        if flag is None:
            return False
        flag.stop(reason)
        return True

    def end(self, key: str, flag: StopFlag) -> None:
        with self._lock:
            if self._runs.get(key) is flag:
                del self._runs[key]

    def __len__(self) -> int:
        return len(self._runs)
