"""Cancellation (app/serving/sessions.py): a new run or a stop in the same session cancels the run in
flight, a stop reaches a forked ZeroGPU worker through its pickled flag, and stop files are removed."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from types import SimpleNamespace

import gradio as gr
import pytest
import torch
from races import PROMPT, race_run, race_tab, run_args
from serving_stubs import fake_zero_gpu

from app.drift.tab import build_drift_tab
from app.race.decode import race_snapshots
from app.race.tab import build_race_tab
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL
from app.serving.sessions import RunBoard, StopFlag
from core.loading import chat_prompt_ids

ME = SimpleNamespace(session_hash="me")
LONG = run_args(gen_len=256, block_len=32)  # a race a stop or a new run finds still decoding


def test_a_new_run_or_stop_in_the_same_session_cancels_the_run_in_flight(registry) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    other = SimpleNamespace(session_hash="other")
    first = h.run(**LONG, request=ME)
    theirs = h.run(**LONG, request=other)
    for _ in range(3):
        next(first)
    assert "Waiting for the model" in next(theirs)[h.panels.status]  # told once; asked again it would wait its turn
    second = h.run(**LONG, request=ME)
    next(second)  # starting it cancels `first` before its next step
    assert list(first) == []
    assert "Stopped." in h.ctx.stop(ME)
    rest = list(second)  # no further step; one last banner, so no late update hides the stop
    assert len(rest) == 1 and "Stopped." in rest[0][h.panels.status]
    assert next(theirs)  # another session's run goes on
    theirs.close()
    assert len(board) == 0


def test_a_run_replaced_before_its_first_step_stops_instead_of_taking_its_successors_flag(registry) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    first = h.run(**LONG, request=ME)
    next(first)  # "Starting...": registered, no decoder started yet (where an 8B model would still load)
    second = h.run(**LONG, request=ME)
    next(second)  # registers `second` under the same session, which flags `first`
    assert list(first) == []  # not one step after it was replaced
    assert next(second, None) is not None  # the new run streams on
    second.close()
    assert len(board) == 0


@pytest.mark.parametrize(("build", "policy", "done"), [(build_race_tab, "vanilla", "finished"),
                                                       (build_drift_tab, "entropy", "Done")], ids=["race", "drift"])
def test_on_zero_gpu_the_worker_gets_a_pickled_copy_of_the_stop_flag_and_a_stop_reaches_it(gpu_registry, build, policy,
                                                                                             done) -> None:
    # spaces.GPU pickles the arguments into a forked worker: the decode there polls only a copy of the flag
    with gr.Blocks():
        h = build(AppContext(gpu_registry, RunBoard(), throttle_s=60))
    sent = fake_zero_gpu(h.runner)
    me = SimpleNamespace(session_hash="z")
    out = list(h.run(**run_args(model="gpu", policy=policy), request=me))
    assert done in out[-1][h.panels.status] and len(sent) == 1 and isinstance(sent[0][1], StopFlag)
    run = h.run(**run_args(model="gpu", policy=policy, gen_len=256, block_len=32), request=me)
    next(run), next(run)  # "Starting...", then the first step
    h.ctx.stop(me)  # sets the server's flag, not the copy the decode polls
    rest = list(run)
    assert len(rest) == 1 and "Stopped." in rest[0][h.panels.status]
    assert not any(os.path.exists(args[1].path) for args in sent) and len(h.ctx.board) == 0


def _race_in_child(flag_bytes: bytes, model, params, prompt_ids: list[int], report) -> None:
    """A forked worker's side, as on ZeroGPU: a real race that polls an unpickled copy of the flag."""
    torch.set_num_threads(1)  # the parent's OpenMP pool does not survive a fork; stay single-threaded
    flag = pickle.loads(flag_bytes)
    n, finished = 0, False
    for snap in race_snapshots(model, prompt_ids, params, throttle_s=0, should_stop=flag.is_set):
        n, finished = n + 1, snap.finished
        if n == 1:
            report.put("started")
    report.put((n, finished))


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # spaces forks a threaded server as well
def test_a_stop_flag_survives_pickling_and_a_forked_worker_sees_the_servers_stop(registry) -> None:
    flag = StopFlag()
    copy = pickle.loads(pickle.dumps(flag))
    assert copy.path == flag.path and not copy.is_set()
    copy.set()
    assert flag.is_set()  # a copy's set() reaches the original too
    flag.discard()
    assert not copy.is_set()

    board = RunBoard()
    key, flag = board.begin("worker")
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    params = race_run(registry, gen_len=256, block_len=32)
    ctx = multiprocessing.get_context("fork")  # what spaces uses for its GPU worker
    report = ctx.Queue()
    child = ctx.Process(
        target=_race_in_child, args=(pickle.dumps(flag), model, params, chat_prompt_ids(tokenizer, PROMPT), report)
    )
    child.start()
    try:
        assert report.get(timeout=120) == "started"
        assert board.cancel("worker")  # the Stop button, in the server process
        steps, finished = report.get(timeout=120)
        child.join(timeout=30)
    finally:
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0 and not finished and steps < 100  # stopped early, far from 256 tokens
    board.end(key, flag)
    assert not os.path.exists(flag.path) and len(board) == 0


def test_stop_files_are_removed_when_a_run_ends_is_stopped_or_is_replaced(registry) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    flags = []
    begin = board.begin

    def recording_begin(session: str | None):
        key, flag = begin(session)
        flags.append(flag)
        return key, flag

    board.begin = recording_begin
    assert "finished" in list(h.run(**run_args(), request=ME))[-1][h.panels.status]
    stopped = h.run(**LONG, request=ME)
    next(stopped), next(stopped)
    h.ctx.stop(ME)
    assert flags[1].is_set()  # the stop is a file while the run is in flight
    list(stopped)
    replaced = h.run(**LONG, request=ME)
    next(replaced), next(replaced)
    new = h.run(**LONG, request=ME)
    next(new)
    assert list(replaced) == []
    new.close()
    assert len(flags) == 4 and not any(os.path.exists(f.path) for f in flags) and len(board) == 0
