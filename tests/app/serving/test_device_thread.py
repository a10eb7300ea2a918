"""app/serving/device_thread.py: CPU work handed to one serving thread, inline when nothing serves."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from app.serving.device_thread import DeviceThread, decode_threads
from core.device import usable_cpus


@pytest.fixture
def served() -> Iterator[tuple[DeviceThread, int]]:
    """A DeviceThread served by a thread of its own: (it, the serving thread's ident)."""
    device, stop = DeviceThread(), threading.Event()
    server = threading.Thread(target=device.serve, kwargs={"until": stop.is_set, "poll_s": 0.01})
    server.start()
    while device.serving_thread is None:
        threading.Event().wait(0.001)
    yield device, server.ident
    stop.set()
    server.join(timeout=10)
    assert not server.is_alive()


def test_nothing_serving_runs_inline_on_the_caller() -> None:
    device = DeviceThread()
    assert device.serving_thread is None
    assert device.call(threading.get_ident) == threading.get_ident()


def test_a_call_runs_on_the_serving_thread_and_returns_or_raises_there(served) -> None:
    device, ident = served
    assert device.serving_thread == ident != threading.get_ident()
    assert device.call(threading.get_ident) == ident
    assert device.call(divmod, 7, 2) == (3, 1)
    with pytest.raises(ValueError, match="bad prompt"):
        device.call(lambda: (_ for _ in ()).throw(ValueError("bad prompt")))
    assert device.call(threading.get_ident) == ident  # an error does not stop the serving


def test_iterate_takes_every_step_and_the_closing_on_the_serving_thread(served) -> None:
    device, ident = served
    seen, closed_on = [], []

    def steps():
        try:
            for i in range(5):
                seen.append(threading.get_ident())
                yield i
        finally:
            closed_on.append(threading.get_ident())

    assert list(device.iterate(steps())) == [0, 1, 2, 3, 4]
    assert seen == [ident] * 5 and closed_on == [ident]
    seen.clear(), closed_on.clear()
    stopped = device.iterate(steps())
    assert next(stopped) == 0
    stopped.close()  # a Stop: the decode's own clean-up runs, on the serving thread
    assert seen == [ident] and closed_on == [ident]


def test_a_serving_thread_calling_runs_inline_and_one_server_at_a_time(served) -> None:
    device, ident = served
    assert device.call(device.call, threading.get_ident) == ident  # no deadlock on itself
    with pytest.raises(RuntimeError, match="already serves"):
        device.serve(until=lambda: True)


def test_after_serving_ends_calls_run_inline_again() -> None:
    device = DeviceThread()
    device.serve(until=lambda: True)
    assert device.serving_thread is None
    assert device.call(threading.get_ident) == threading.get_ident()


def test_decodes_take_every_cpu_but_one_and_at_least_one(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert (usable_cpus(), decode_threads()) == (4, 3)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5})
    assert (usable_cpus(), decode_threads()) == (1, 1)
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS, Windows: every CPU
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert (usable_cpus(), decode_threads()) == (8, 7)
