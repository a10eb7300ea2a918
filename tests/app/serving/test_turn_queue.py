"""Decodes take turns on a device (app/serving/turn_queue.py): first come first served, never two at once, a
waiting run told its place, a long run one turn per snapshot, a stop while waiting honoured."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from fake_clock import FakeClock
from serving_stubs import STUB_MODEL, StubRegistry, stub_context

from app.serving.context import AppContext
from app.serving.runner import TabRunner, TabView
from app.serving.turn_queue import TurnQueue, in_turns, waiting_text


def test_first_come_first_served_with_places_and_estimates() -> None:
    clock = FakeClock()
    q = TurnQueue(clock=clock)
    a, b, c = q.join(), q.join(), q.join()
    assert [q.ahead(t) for t in (a, b, c)] == [0, 1, 2] and q.wait(a, 0) and not q.wait(b, 0)
    assert q.estimate_s(c) is None  # no run has finished: no history to estimate from
    clock.now = 4.0
    q.leave(a)  # held 4 s
    assert q.wait(b, 0) and q.ahead(c) == 1 and q.estimate_s(b) == 0.0
    clock.now = 5.0  # b has held 1 s of the 4 s a run takes
    assert q.estimate_s(c) == 3.0
    d = q.join()
    assert q.estimate_s(d) == 3.0 + 4.0
    q.leave(c)  # a waiter may give up its place
    assert q.ahead(d) == 1 and len(q) == 2
    q.leave(c)  # twice is harmless
    assert len(q) == 2


def test_slices_do_not_count_in_the_estimate() -> None:
    clock = FakeClock()
    q = TurnQueue(clock=clock)
    t = q.join(record=False)
    clock.now = 100.0
    q.leave(t)
    assert q.estimate_s(q.join()) is None


def test_in_turns_holds_the_queue_for_each_item_only() -> None:
    q = TurnQueue()
    seen = []

    def items():
        for i in range(3):
            seen.append((i, len(q)))  # computed while our ticket is in line (and at its head)
            yield i

    assert list(in_turns(q, items(), lambda: False)) == [0, 1, 2] and len(q) == 0
    assert [n for _, n in seen] == [1, 1, 1]
    holder = q.join()
    stops = iter([False, True])
    assert list(in_turns(q, items(), lambda: next(stops), poll_s=0.01)) == []  # stopped while waiting
    assert len(q) == 1 and q.wait(holder, 0)


def test_waiting_text_names_the_place_and_the_estimate() -> None:
    assert waiting_text(1, None).startswith("Waiting for the model: 1 run ahead of yours.")
    assert "2 runs ahead of yours, about 7 s." in waiting_text(2, 6.6)


STATUS = "status"  # stands for a tab's banner component: the runner takes any key


class Job:
    def __init__(self, decode) -> None:
        self.decode = decode

    def snapshots(self, model, tokenizer, should_stop):
        return self.decode(model, tokenizer, should_stop)


class View(TabView):
    def __init__(self, decode) -> None:
        super().__init__(STUB_MODEL, STATUS)
        self.job = Job(decode)

    def start(self, model, tokenizer):
        return {STATUS: "start"}, self.job

    def show(self, snapshot):
        return {STATUS: "show", "snapshot": snapshot}

    def message(self, text):
        return {STATUS: text}


def test_a_run_given_its_turn_as_its_wait_times_out_is_not_told_it_waits() -> None:
    """The run ahead ends between the waiting run's timed-out wait and its look at its place: no run is
    ahead then (the turn is its own, which the next wait takes), and that is no place to tell."""
    ctx = stub_context()
    queue = ctx.turn_queue("cpu")
    other = queue.join()  # another visitor's decode holds the device
    wait = queue.wait

    def times_out_as_the_turn_comes(ticket, timeout_s):
        if queue.ahead(ticket):
            queue.leave(other)  # ends just after this wait timed out
            return False
        return wait(ticket, timeout_s)

    queue.wait = times_out_as_the_turn_comes
    out = list(TabRunner(ctx, STATUS).run(SimpleNamespace(session_hash="b"), lambda: View(lambda *_: iter([7]))))
    assert out == [{STATUS: "start"}, {STATUS: "show", "snapshot": 7}]


def test_two_runs_at_once_decode_in_turn_and_the_second_is_told_its_place(monkeypatch) -> None:
    monkeypatch.setattr("app.serving.runner.WAIT_POLL_S", 0.02)  # b checks its place ~35 times while a runs
    ctx = stub_context()
    intervals, lock = [], threading.Lock()

    def decode(model, tokenizer, should_stop):
        for i in range(5):
            start = time.perf_counter()
            time.sleep(0.15)  # a step's compute: a's run lasts longer than one poll of b's wait
            with lock:
                intervals.append((start, time.perf_counter()))
            yield i

    runner = TabRunner(ctx, STATUS)
    outputs = {}

    def visit(name: str) -> None:
        outputs[name] = list(runner.run(SimpleNamespace(session_hash=name), lambda: View(decode)))

    first = threading.Thread(target=visit, args=("a",))
    first.start()
    time.sleep(0.03)
    visit("b")
    first.join()
    intervals.sort()
    assert len(intervals) == 10 and all(end <= nxt for (_, end), (nxt, _) in zip(intervals, intervals[1:]))
    waiting = [o for o in outputs["b"] if o[STATUS].startswith("Waiting")]
    assert waiting == [outputs["b"][0]] and waiting[0][STATUS].startswith("Waiting for the model: 1 run ahead of yours")
    assert [o for o in outputs["a"] if o[STATUS] == "show"] == [{STATUS: "show", "snapshot": i} for i in range(5)]
    assert len(ctx.turn_queue("cpu")) == 0


def test_a_stop_while_waiting_ends_the_run_and_gives_up_its_place() -> None:
    ctx = AppContext(StubRegistry())
    queue = ctx.turn_queue("cpu")
    holder = queue.join()
    runner = TabRunner(ctx, STATUS)
    me = SimpleNamespace(session_hash="me")
    run = runner.run(me, lambda: View(lambda *a: iter([1])))
    assert next(run)[STATUS].startswith("Waiting for the model")
    ctx.stop(me)
    assert list(run)[-1] == {STATUS: "Stopped."}
    assert len(queue) == 1 and queue.wait(holder, 0)


def test_a_run_with_a_turn_per_snapshot_lets_a_race_in_between() -> None:
    ctx = stub_context()
    order = []

    def sweep(model, tokenizer, should_stop):
        for i in range(6):
            time.sleep(0.02)
            order.append(f"sweep {i}")
            yield i

    def race(model, tokenizer, should_stop):
        order.append("race")
        yield 0

    long_run = threading.Thread(target=lambda: list(TabRunner(ctx, STATUS, turn_per_snapshot=True).run(None,
                                                                                                lambda: View(sweep))))
    long_run.start()
    time.sleep(0.05)
    list(TabRunner(ctx, STATUS).run(None, lambda: View(race)))
    long_run.join()
    assert order.index("race") < order.index("sweep 5") and len(order) == 7
