"""A stand-in for Hugging Face's `spaces` package, running a function decorated with spaces.GPU as
ZeroGPU does: in a worker process forked from the server, which is kept and reused by the next call
while it lives and may be killed at any time (`kill_worker`). A call's arguments are pickled into the
worker and its results (a generator's items, one at a time) pickled back through a pipe; an exception
in the worker is raised in the caller. A call abandoned mid-way (its generator closed early) kills its
worker, and the next call forks a fresh one.

Only tests/app/serving/test_zero_gpu.py puts this folder on sys.path.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterator

_functions: list[Callable] = []  # what was decorated: a worker knows them, being forked after
_worker: tuple[multiprocessing.process.BaseProcess, object] | None = None  # (process, our end of its pipe)


def GPU(fn: Callable | None = None, duration: int = 60) -> Callable:  # noqa: N802 -- the package's own name
    def decorate(f: Callable) -> Callable:
        index = len(_functions)
        _functions.append(f)
        if inspect.isgeneratorfunction(f):
            return lambda *args, **kwargs: _stream(index, args, kwargs)
        return lambda *args, **kwargs: list(_stream(index, args, kwargs))[0]
    return decorate(fn) if fn is not None else decorate


def worker_pid() -> int | None:
    """The pid of the live worker, if there is one."""
    return _worker[0].pid if _worker is not None and _worker[0].is_alive() else None


def kill_worker() -> None:
    """What ZeroGPU may do at any time between calls: the next call forks a fresh worker."""
    global _worker
    if _worker is not None:
        process, conn = _worker
        process.kill()
        process.join(timeout=30)
        conn.close()
        _worker = None


def _stream(index: int, args: tuple, kwargs: dict) -> Iterator:
    conn = _connection()
    conn.send_bytes(pickle.dumps((index, args, kwargs)))
    finished = False
    try:
        while True:
            kind, value = pickle.loads(conn.recv_bytes())
            if kind == "item":
                yield value
                continue
            finished = True
            if kind == "error":
                raise value
            return
    finally:
        if not finished:
            kill_worker()


def _connection():
    global _worker
    if worker_pid() is None:
        kill_worker()
        context = multiprocessing.get_context("fork")
        ours, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(theirs,), daemon=True)
        process.start()
        _worker = (process, ours)
    return _worker[1]


def _serve(conn) -> None:
    import torch

    torch.set_num_threads(1)  # the server's OpenMP pool does not survive a fork
    while True:
        try:
            index, args, kwargs = pickle.loads(conn.recv_bytes())
        except EOFError:
            os._exit(0)
        try:
            out = _functions[index](*args, **kwargs)
            for item in out if inspect.isgenerator(out) else [out]:
                conn.send_bytes(pickle.dumps(("item", item)))
            conn.send_bytes(pickle.dumps(("end", None)))
        except Exception as e:  # noqa: BLE001 -- the caller raises it
            try:
                conn.send_bytes(pickle.dumps(("error", e)))
            except Exception:  # noqa: BLE001 -- an error pickle cannot carry, told by name
                conn.send_bytes(pickle.dumps(("error", RuntimeError(f"{type(e).__name__}: {e}"))))
