"""One run per browser session: a new Run or a Stop cancels the session's run in flight.

Gradio's own cancellation cannot interrupt a step that is executing, so each run also polls a flag
between steps; setting it ends both decoders at once, within one step. A run holds on to the flag
object `begin` gave it: a flag looked up later by session key could be its successor's.

The flag is a file, not a threading.Event: on ZeroGPU, spaces.GPU pickles the GPU function's
arguments into a forked worker process, and closing its wrapper generator just waits for the worker.
A path pickles, and the worker sees the file appear when the server sets the flag.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid

_dir_lock = threading.Lock()
_dir: str | None = None


def _stop_dir() -> str:
    """This server's private folder for stop files (mkdtemp: mode 0700, a fresh random name)."""
    global _dir
    with _dir_lock:
        if _dir is None:
            _dir = tempfile.mkdtemp(prefix="entropycache-stop-")
            atexit.register(_remove_dir, _dir, os.getpid())
        return _dir


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked worker that runs atexit must not delete the server's folder
        shutil.rmtree(path, ignore_errors=True)


class StopFlag:
    """A run's stop flag, with why it was set: 'stop' (the Stop button) or 'replaced' (a new Run).

    Set means its file exists. A pickled copy (the one a ZeroGPU worker gets) names the same file, so
    either side sees the other's set(); `reason` is only meaningful on the server's own object.
    The file's name is a random hex id in the server's folder, never anything a visitor sent.
    """

    def __init__(self) -> None:
        self.path = os.path.join(_stop_dir(), uuid.uuid4().hex)
        self.reason = ""

    def set(self) -> None:
        with open(self.path, "a"):
            pass

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def stop(self, reason: str) -> None:
        self.reason = reason
        self.set()

    def discard(self) -> None:
        """Remove the file (once the run is over: nothing polls it any more)."""
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass


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
        with self._lock:  # set under the lock, so `end` cannot remove the file first and leave this one behind
            flag = self._runs.get(session) if session else None
            if flag is None:
                return False
            flag.stop(reason)
        return True

    def end(self, key: str, flag: StopFlag) -> None:
        with self._lock:
            if self._runs.get(key) is flag:
                del self._runs[key]
            flag.discard()  # a replaced run too: its successor set it, but only it removes it

    def __len__(self) -> int:
        return len(self._runs)
