"""CPU decodes run on one thread: the main thread of `python app.py`, as they do in a plain script.

PyTorch runs CPU kernels on an OpenMP team owned by the thread that calls them, and the OpenMP in its
wheels (libgomp) keeps a team's threads spinning between kernels only for the process's initial
thread. Stepped from one of gradio's worker threads, a decode runs markedly slower than the same
decode in a script, small elementwise kernels far more than matrix multiplies, so that even the
ratio between a full step and a partial one, the speedup a race shows, moves (docs/BENCHMARKS.md,
"The app under load"). So the app hands every CPU model load and decode step to the main thread,
which does nothing else: its decodes run at the speed of `python -m evaluation` and the bench, and its
clocks measure what theirs do.

That thread decodes with every core but one (`decode_threads`): the server's own work (the previous
visitor's last update, the next visitor's request, a waiting visitor's place in line) needs a core
now and then, and an OpenMP team that spans every core stalls at each barrier whenever one of them
is taken; on a shared machine the last core comes and goes.

`CPU_THREAD.serve()` is what the main thread runs once the server is up; until something serves (a
test that builds the app in process), `call` runs inline on the calling thread. GPU decodes stay on
the caller's thread: ZeroGPU attributes a GPU call to the request that makes it. No gradio here.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TypeVar

from app.serving.closing import close
from core.device import usable_cpus

T = TypeVar("T")
_END = object()


class DeviceThread:
    """Callers' jobs, run one at a time on the thread that serves it; callers wait for their result."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._serving: int | None = None  # the ident of the thread in serve(), if any

    @property
    def serving_thread(self) -> int | None:
        """The ident of the thread that runs the jobs now (None: calls run inline)."""
        return self._serving

    def call(self, fn: Callable[..., T], *args: object) -> T:
        """fn(*args) on the serving thread (waiting for it), or inline when none serves or the caller is it."""
        with self._lock:
            inline = self._serving is None or self._serving == threading.get_ident()
            if not inline:
                future: Future = Future()
                self._jobs.put((future, fn, args))
        return fn(*args) if inline else future.result()

    def iterate(self, items: Iterator[T]) -> Iterator[T]:
        """`items`, each step of it (and its closing) taken on the serving thread."""
        try:
            while (item := self.call(next, items, _END)) is not _END:
                yield item
        finally:
            self.call(close, items)

    def serve(self, until: Callable[[], bool] = lambda: False, poll_s: float = 0.1) -> None:
        """Run callers' jobs on this thread until `until()` is true or an exception (Ctrl-C) stops it;
        jobs still queued then fail with a RuntimeError, and later calls run inline again."""
        with self._lock:
            if self._serving is not None:
                raise RuntimeError("another thread already serves this DeviceThread")
            self._serving = threading.get_ident()
        try:
            while not until():
                try:
                    future, fn, args = self._jobs.get(timeout=poll_s)
                except queue.Empty:
                    continue
                _run(future, fn, args)
        finally:
            with self._lock:
                self._serving = None
            while True:
                try:
                    future, _, _ = self._jobs.get_nowait()
                except queue.Empty:
                    break
                future.set_exception(RuntimeError("the server is stopping"))


def decode_threads() -> int:
    """OpenMP threads for CPU decodes: every CPU this process may run on but one, which the server keeps."""
    return max(1, usable_cpus() - 1)


def _run(future: Future, fn: Callable, args: tuple) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except Exception as e:  # the caller re-raises it (a ValueError from core, an out-of-memory)
        future.set_exception(e)
    except BaseException as e:  # Ctrl-C: the caller is told, and the serving loop stops too
        future.set_exception(e)
        raise
    else:
        future.set_result(result)


CPU_THREAD = DeviceThread()  # one per process: the main thread is one per process
