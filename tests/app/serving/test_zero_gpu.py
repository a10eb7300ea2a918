"""The app on ZeroGPU as it is now, on the CPU: a stand-in `spaces` package (tests/app/serving/fake_spaces) whose GPU
decorator runs the Race tab's decode in a forked worker, reused while it lives, the snapshots pickled
back through a pipe. Races go through the tab's own handler, the 'GPU' model being the embedded one on
the CPU with the static path on (what a GPU replays from graphs, run eagerly here)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from serving_stubs import gpu_stand_in

import app.race.decode
import app.serving.context
import app.serving.gpu
import core.passes
from app.controls.declared import RUN_CONTROLS
from app.race.tab import build_race_tab
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL, ModelRegistry
from app.serving.sessions import RunBoard
from evaluation.tasks.word_problems import make_split

pytestmark = pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # the worker forks a threaded server

PROMPT = make_split("test", 1)[0].prompt
FAKE_SPACES = Path(__file__).parent / "fake_spaces"


@pytest.fixture
def spaces(monkeypatch):
    """The stand-in package, importable for this test alone and seen by app/serving/gpu.py."""
    monkeypatch.syspath_prepend(str(FAKE_SPACES))
    monkeypatch.delitem(sys.modules, "spaces", raising=False)
    fake = importlib.import_module("spaces")
    monkeypatch.setattr(app.serving.gpu, "spaces", fake)
    yield fake
    fake.kill_worker()
    sys.modules.pop("spaces", None)


@pytest.fixture
def gpu_model(registry, monkeypatch):
    """A registry whose one 'GPU' model is the embedded one (on the CPU), decoded on the static path."""
    yield gpu_stand_in(registry, monkeypatch, graphs="on")
    core.passes.release_graphs(registry.get(EMBEDDED_LABEL)[0])


@pytest.fixture
def calls(tmp_path, monkeypatch) -> Path:
    """A file each process appends to when it warms a model up ('warm <pid>') or captures a race's passes
    ahead ('capture <pid> <idle workspaces of the race's length it holds>'): a forked worker's memory
    is not ours to read."""
    log = tmp_path / "calls.txt"

    def warm_up(model, *args):
        with log.open("a") as f:
            f.write(f"warm {os.getpid()}\n")
        return real_warm_up(model, *args)

    def capture_ahead(model, length, *args, **kwargs):
        kept = sum(ws.length == length for ws in core.passes.idle_workspaces(model))
        with log.open("a") as f:
            f.write(f"capture {os.getpid()} {kept}\n")
        return real_capture(model, length, *args, **kwargs)

    real_warm_up, real_capture = app.serving.context.warm_up, app.race.decode.capture_ahead
    monkeypatch.setattr(app.serving.context, "warm_up", warm_up)
    monkeypatch.setattr(app.race.decode, "capture_ahead", capture_ahead)
    return log


def race_tab(registry: ModelRegistry):
    """The Race tab as a server builds it once (spaces.GPU decorates its runner then, if installed)."""
    with gr.Blocks():
        return build_race_tab(AppContext(registry, RunBoard(), throttle_s=0))


def race(tab) -> tuple[str, list[list[int]], list[int]]:
    """One race through the tab's handler: its last status line, each lane's final tokens and step count
    (from the trace it wrote)."""
    values = {key: control.default for key, control in RUN_CONTROLS.items()} | dict(gen_len=16, block_len=8)
    sent = dict(prompt=PROMPT, model="gpu", policy="vanilla", **values)
    out = list(tab.run(**sent, request=SimpleNamespace(session_hash="zero")))
    status = next(o[tab.panels.status] for o in reversed(out) if tab.panels.status in o)
    trace = json.loads(Path(next(o[tab.panels.trace] for o in reversed(out) if o.get(tab.panels.trace))).read_text())
    return str(status), [lane["events"][-1]["tokens"] for lane in trace["lanes"]], \
        [len(lane["events"]) for lane in trace["lanes"]]


def race_without_the_stand_in(registry: ModelRegistry, monkeypatch) -> tuple[str, list[list[int]], list[int]]:
    """The same race in this process, as a server without `spaces` runs it; the model's workspaces are
    dropped after, so that a worker forked later starts as ZeroGPU's do, from a server that never decoded."""
    with monkeypatch.context() as m:
        m.setattr(app.serving.gpu, "spaces", None)
        result = race(race_tab(registry))
    core.passes.release_graphs(registry.get("gpu")[0])
    return result


def test_races_run_in_a_reused_forked_worker_that_keeps_its_warm_model_and_workspaces(gpu_model, spaces, calls,
                                                                                          monkeypatch):
    alone = race_without_the_stand_in(gpu_model, monkeypatch)
    assert "finished" in alone[0] and calls.read_text().startswith(f"warm {os.getpid()}\n")
    calls.write_text("")

    tab = race_tab(gpu_model)
    first = race(tab)
    worker = spaces.worker_pid()
    second = race(tab)
    assert spaces.worker_pid() == worker not in (None, os.getpid())
    spaces.kill_worker()  # ZeroGPU may take the worker away between calls
    third = race(tab)
    fresh = spaces.worker_pid()
    assert fresh not in (None, worker, os.getpid())

    assert first[1:] == second[1:] == third[1:] == alone[1:]  # the same tokens and steps as without the stand-in
    assert all("finished" in r[0] for r in (first, second, third))
    # Warmed up once per worker, never in the server; each race's capture-ahead ran in the worker, and
    # the reused worker still held the workspaces (on a GPU, with their graphs) of its first race.
    lines = [line.split() for line in calls.read_text().splitlines()]
    assert [line[:2] for line in lines] == [["warm", str(worker)], ["capture", str(worker)],
                                            ["capture", str(worker)], ["warm", str(fresh)], ["capture", str(fresh)]]
    assert lines[2][2] == "2" and lines[1][2] == lines[4][2] != "2"


def test_when_capturing_fails_in_the_worker_the_race_runs_eagerly_and_says_so(gpu_model, spaces, monkeypatch):
    alone = race_without_the_stand_in(gpu_model, monkeypatch)
    monkeypatch.setattr(core.passes, "single_cuda_device", lambda model: next(model.parameters()).device)
    monkeypatch.setattr(core.passes, "_graph_pool", object)  # as on one GPU: a pool, and captures attempted

    def refuse(self, model, size):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nCUDA kernel errors ...")

    monkeypatch.setattr(core.passes.Workspace, "_capture", refuse)
    status, tokens, steps = race(race_tab(gpu_model))
    assert spaces.worker_pid() not in (None, os.getpid())
    assert (tokens, steps) == alone[1:]
    assert "finished" in status and "CUDA graphs could not be captured (RuntimeError: CUDA error: operation not " \
        "permitted when stream is capturing): every lane runs eagerly." in status
    assert "CUDA graphs could not" not in alone[0] and "kernel errors" not in status
