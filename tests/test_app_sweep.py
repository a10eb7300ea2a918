"""The Sweep tab, on CPU: request validation, the Pareto front on known points, the streamed sweep
against core.bench.sweep for the same settings, loading a point's settings, and Stop.

The model is the embedded one unless ENTROPYCACHE_MODEL names another checkpoint folder of the same format.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import pytest
from conftest import fake_zero_gpu, save_word_problems_model

from app.controls.declared import RUN_CONTROLS
from app.controls.panel import build_inputs
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL
from app.serving.sessions import RunBoard, StopFlag
from app.sweep.decode import MAX_PROBLEMS, SweepParams, parse_list, parse_sweep
from app.sweep.render import TABLE_HEADERS, pareto_figure, pareto_front, progress_html
from app.sweep.tab import SweepResult, SweepTab, build_sweep_tab
from app.widgets.banner import STOPPED
from core.bench import Progress, sweep
from core.decoder import DecodeConfig
from core.tasks import held_out

EXACT = ("accuracy", "agreement", "rows_fraction", "full_steps_fraction", "steps", "n", "label")


def sweep_args(**overrides) -> dict:
    a = dict(model=EMBEDDED_LABEL, task="word problems", taus="0.5, 3", ks="2", problems=2, gen_len=32,
             block_len=16, steps=0, threshold=0)
    a.update(overrides)
    return a


def sweep_tab(registry) -> SweepTab:
    """The Sweep tab as the app builds it, loading picked points into two input panels (the Race's and
    the Drift tab's)."""
    with gr.Blocks():
        targets = [build_inputs(registry), build_inputs(registry, prefix="drift-")]
        return build_sweep_tab(AppContext(registry, RunBoard(), throttle_s=0), targets)


def exact(rows: list[dict]) -> list[dict]:
    """The parts of bench rows that do not depend on timing."""
    return [{k: r[k] for k in EXACT} for r in rows]


# ---- validation -------------------------------------------------------------------------------------


def test_a_good_request_parses_into_bounded_values() -> None:
    p = parse_sweep(**sweep_args(taus="0.1 0.5,0.5, 3", ks="1,2", problems=4.0), models=[EMBEDDED_LABEL])
    assert p == SweepParams(EMBEDDED_LABEL, "word problems", (0.1, 0.5, 3.0), (1, 2), 4,
                            DecodeConfig(gen_len=32, block_len=16))
    assert p.config.steps is None and p.config.threshold is None and p.config.temperature == 0  # greedy
    assert parse_list("2, 1, 2", RUN_CONTROLS["k"], 4) == (2, 1)  # duplicates dropped, order kept


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(taus=""), "at least one value for tau"),
        (dict(taus="0.5, abc"), "'abc' is not a number"),
        (dict(taus="13"), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got 13"),
        (dict(taus="nan"), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got NaN"),
        (dict(taus=", ".join(str(t / 10) for t in range(9))), "At most 8 values for tau"),
        (dict(taus="0.5," * 100), "too long"),
        (dict(ks="1.5"), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got 1.5"),
        (dict(ks="1, 2, 3, 4, 5"), "At most 4 values for k"),
        (dict(problems=0), f"held-out prompts must be an integer in \\[1, {MAX_PROBLEMS}\\], got 0"),
        (dict(problems=MAX_PROBLEMS + 1), f"held-out prompts must be an integer in \\[1, {MAX_PROBLEMS}\\], got 51"),
        (dict(problems=2.5), "held-out prompts must be an integer in .*, got 2.5"),
        (dict(problems=True), "held-out prompts must be an integer in .*, got True"),
        (dict(model="/etc/passwd"), "Unknown model"),
        (dict(task="poems"), "Unknown task 'poems'; choose one of: stories, word problems, word problems, 4-shot"),
        (dict(gen_len=30), "do not fit together: gen_len 30 is not a multiple of block_len 16"),
        (dict(steps=4, threshold=0.9), "Set steps to 0"),
        (dict(gen_len=100000), "gen length must be an integer in \\[1, 512\\], got 100000"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sweep(**sweep_args(**overrides), models=[EMBEDDED_LABEL])


def test_each_task_sweeps_its_own_held_out_prompts() -> None:
    def items(task: str) -> list:
        return parse_sweep(**sweep_args(task=task, problems=3), models=[EMBEDDED_LABEL]).items()

    assert items("stories") == held_out("stories", 3)
    assert items("word problems") == held_out("words", 3)
    assert items("word problems, 4-shot") == held_out("words", 3, shots=4)
    assert all(i.prompt.count("question :") == 5 for i in items("word problems, 4-shot"))


def test_a_model_that_cannot_read_the_task_is_told_before_any_decode(tmp_path) -> None:
    """A model whose vocabulary has only the word problems' words, asked for a sweep on stories."""
    from app.serving.registry import ModelRegistry, local_choice

    registry = ModelRegistry([local_choice(save_word_problems_model(tmp_path), "sums", "cpu")])
    s = sweep_tab(registry)
    with pytest.raises(gr.Error, match="does not know 8 words of the prompt: 'tell', 'a', 'story'"):
        next(s.run(**sweep_args(model="sums", task="stories"), metric="accuracy",
                   request=SimpleNamespace(session_hash="me")))
    assert not registry.is_loaded("sums") and len(s.ctx.board) == 0


# ---- the figure, on known points --------------------------------------------------------------------


def test_the_pareto_front_keeps_exactly_the_undominated_points_in_x_order() -> None:
    points = [(1.0, 0.9), (2.0, 0.8), (1.5, 0.95), (2.0, 0.7), (3.0, 0.5), (3.0, 0.5)]
    assert pareto_front(points) == [2, 1, 4, 5]  # ties are kept: neither beats the other
    assert pareto_front([]) == [] and pareto_front([(1.0, 1.0)]) == [0]


def row(policy: str, speedup: float, accuracy: float, **params) -> dict:
    label = "none" if policy == "none" else f"entropy(tau={params['tau']}, k={params['k']})"
    return dict(policy=policy, params=params, label=label, n=3, accuracy=accuracy, agreement=accuracy,
                speedup=speedup, ceiling=2 * speedup, rows_fraction=0.5, full_steps_fraction=0.1,
                decision_overhead=0.01)


def test_the_figure_has_one_trace_per_k_each_point_carrying_its_settings() -> None:
    rows = [row("none", 1.0, 0.9), row("entropy", 2.0, 0.9, tau=0.5, k=1), row("entropy", 3.0, 0.8, tau=3.0, k=1),
            row("entropy", 1.5, 0.7, tau=0.5, k=2)]
    fig = pareto_figure(rows, "accuracy", selected=(3.0, 1))
    names = [t.name for t in fig.data]
    assert names == ["k = 1", "k = 2", "Pareto front", "none", "loaded"]
    assert [list(c) for c in fig.data[0].customdata] == [[0.5, 1], [3.0, 1]]
    assert list(fig.data[2].x) == [2.0, 3.0]  # (1.5, 0.7) is beaten by (2.0, 0.9)
    assert list(fig.data[4].x) == [3.0] and "3 problems" in fig.layout.title.text
    with pytest.raises(ValueError, match="unknown metric"):
        pareto_figure(rows, "speed")


def test_progress_bar_shows_decodes_and_problems() -> None:
    html = progress_html(Progress(4, 15, 1, []), 2)
    assert "4 of 15 decodes, 1 of 2 problems done" in html and 'value="4" max="15"' in html


# ---- the sweep itself, against core.bench -----------------------------------------------------------


def test_streamed_sweep_ends_on_the_rows_core_bench_gives_for_the_same_settings(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    params = parse_sweep(**sweep_args(), models=registry.labels)
    snaps = list(params.snapshots(model, tokenizer))
    assert [s.decodes for s in snaps] == list(range(1, 10)) and snaps[-1].total == 9  # (1 warm-up + 2) x 3
    direct = sweep(model, tokenizer, held_out("words", 2), [0.5, 3.0], [2], params.config)
    assert exact(snaps[-1].rows) == exact(direct)
    polls = iter([False, True])
    stopped = list(params.snapshots(model, tokenizer, should_stop=lambda: next(polls)))
    assert [s.decodes for s in stopped] == [1, 2]


def test_the_handler_streams_progress_then_plot_and_table_and_loads_a_point(registry) -> None:
    s = sweep_tab(registry)
    out = list(s.run(**sweep_args(), metric="accuracy", request=SimpleNamespace(session_hash="me")))
    status = s.panels.status
    assert all(set(o) <= set(s.panels.outputs()) for o in out) and len(s.ctx.board) == 0
    assert sum("<progress" in o[status] for o in out) == 9
    assert out[-1] | {status: ""} == out[-2] | {status: ""}  # the final banner comes with the whole result again
    banner, fig, table, result = (out[-1][c] for c in s.panels.outputs())
    assert isinstance(fig, go.Figure) and isinstance(result, SweepResult)
    assert isinstance(table, pd.DataFrame) and list(table.columns) == TABLE_HEADERS
    assert list(table["policy"]) == ["none", "entropy", "entropy"] and list(table["tau"])[1:] == [0.5, 3.0]
    assert "Sweep done: 2 problems" in banner
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    direct = sweep(model, tokenizer, held_out("words", 2), [0.5, 3.0], [2], result.params.config)
    assert exact(result.rows) == exact(direct)

    picked = s.pick_point(json.dumps([3.0, 2, 123]), "accuracy", result)
    tau, k, tau2, k2, message, fig2, chosen = (picked[c] for c in s.picked_outputs())
    assert (tau, k, tau2, k2) == (3.0, 2, 3.0, 2) and "tau 3, k 2" in message and chosen.selected == (3.0, 2)
    assert fig2.data[-1].name == "loaded"
    picked = s.pick_row("agreement", result, SimpleNamespace(index=[1, 0]))
    assert [picked[c] for c in s.picked_outputs()[:4]] == [0.5, 2, 0.5, 2]
    assert "exact decoder" in s.pick_row("accuracy", result, SimpleNamespace(index=[0, 3]))[s.panels.loaded]
    assert s.redraw("agreement", result).layout.yaxis.title.text.startswith("agreement")
    with pytest.raises(gr.Error, match="Unknown y axis 'speed'"):
        s.pick_point("[0.5, 2, 1]", "speed", result)
    with pytest.raises(gr.Error, match="Unknown y axis 'speed'"):
        s.pick_row("speed", result, SimpleNamespace(index=[1, 0]))
    for bad, message in (("[13, 2]", "in \\[0, 12\\], got 13"), ("[0.5, 1.5]", "must be an integer in"),
                         ("oops", "must be \\[tau, k\\]"),  # the issue: never the json parser's own text
                         ("[0.5]", "must be \\[tau, k\\]"), ('["a", 2]', "must be a number")):
        with pytest.raises(gr.Error, match=message):
            s.pick_point(bad, "accuracy", result)


def test_the_handler_refuses_bad_inputs_and_a_stop_ends_the_sweep(registry) -> None:
    s = sweep_tab(registry)
    me = SimpleNamespace(session_hash="me")
    with pytest.raises(gr.Error, match="At most 4 values for k"):
        next(s.run(**sweep_args(ks="1 2 3 4 5"), metric="accuracy", request=me))
    with pytest.raises(gr.Error, match="Unknown y axis"):
        next(s.run(**sweep_args(), metric="speed", request=me))
    run = s.run(**sweep_args(problems=5), metric="accuracy", request=me)
    for _ in range(3):  # warming up, then the first decodes
        next(run)
    assert "Stopped." in s.ctx.stop(me)
    rest = list(run)
    assert rest[-1][s.panels.status] == STOPPED and len(rest) <= 2 and len(s.ctx.board) == 0


def test_on_a_gpu_the_sweep_runs_in_the_gpu_function_with_pickled_arguments(gpu_registry) -> None:
    s = sweep_tab(gpu_registry)
    sent = fake_zero_gpu(s.runner)
    out = list(s.run(**sweep_args(model="gpu", problems=1), metric="accuracy",
                     request=SimpleNamespace(session_hash="g")))
    assert "Sweep done: 1 problem" in out[-1][s.panels.status] and len(sent) == 1
    label, flag, params = sent[0]
    assert label == "gpu" and isinstance(params, SweepParams) and params.model == "gpu" and isinstance(flag, StopFlag)
