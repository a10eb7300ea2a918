"""The Sweep tab, on CPU: request validation (your prompts' lines named), the Pareto front on known points,
the streamed sweep against evaluation.bench.sweep for the same settings and against `python -m evaluation bench
--prompts` for your own prompts, a picked point's texts, the downloads read back, loading a point's
settings, refusals in the status line, and Stop.

The model is the embedded one unless ENTROPYCACHE_MODEL names another checkpoint folder of the same format.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import shlex
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import pytest
from serving_stubs import fake_zero_gpu
from tiny_models import save_word_problems_model

from app.controls.declared import RUN_CONTROLS
from app.controls.panel import build_inputs
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL
from app.serving.sessions import RunBoard, StopFlag
from app.sweep.decode import (
    MAX_OWN_PROMPTS,
    MAX_PROBLEMS,
    OWN_PROMPTS,
    SOURCES,
    SweepJob,
    SweepParams,
    parse_list,
    parse_sweep,
)
from app.sweep.export import SWEEP_FORMAT, cli_command
from app.sweep.panels import SweepResult
from app.sweep.point import neighbour
from app.sweep.render import TABLE_HEADERS, pareto_figure, pareto_front, progress_html
from app.sweep.tab import HELD_OUT_INSTEAD, SweepTab, build_sweep_tab
from app.widgets.banner import STOPPED
from core.config import DecodeConfig
from evaluation import cli
from evaluation.bench import Progress, sweep
from evaluation.tasks import held_out

STORIES = [item.prompt for item in held_out("stories", 3)]
EXACT = ("accuracy", "agreement", "rows_fraction", "full_steps_fraction", "steps", "n", "label")


def sweep_args(**overrides) -> dict:
    a = dict(model=EMBEDDED_LABEL, task="word problems", prompts="", taus="0.5, 3", ks="2", problems=2, gen_len=32,
             block_len=16, steps=0, threshold=0)
    a.update(overrides)
    return a


def sweep_tab(registry) -> SweepTab:
    """The Sweep tab as the app builds it, loading picked points into two input panels (the Race's and
    the Drift tab's)."""
    with gr.Blocks():
        targets = {"race": build_inputs(registry), "drift": build_inputs(registry, prefix="drift-")}
        return build_sweep_tab(AppContext(registry, RunBoard(), throttle_s=0), targets)


def exact(rows: list[dict]) -> list[dict]:
    """The parts of bench rows that do not depend on timing (what each prompt decoded among them)."""
    return [{k: r[k] for k in (*EXACT, "first_divergence_median", "per_prompt")} for r in rows]


def own(*prompts: str, **overrides) -> dict:
    """A sweep of your own prompts, one a line."""
    return sweep_args(task=OWN_PROMPTS, prompts="\n".join(prompts), **overrides)


ME = SimpleNamespace(session_hash="me")


def loaded(out: dict, s: SweepTab) -> list:
    """The tau and k a picked point set in the Race's and the Drift tab's panels, in that order."""
    outputs = s.picked_outputs()
    return [out[outputs[f"{tab}.{key}"]] for tab in ("race", "drift") for key in ("tau", "k")]


def refusal(out: dict, s: SweepTab) -> str:
    """The one output a refused input changes: the status line, as text."""
    assert set(out) == {s.panels.status} and 'class="ec-banner ec-refused"' in out[s.panels.status]
    return html.unescape(re.sub("<[^>]+>", "", out[s.panels.status]))


# ---- validation -------------------------------------------------------------------------------------


def test_a_good_request_parses_into_bounded_values() -> None:
    p = parse_sweep(sweep_args(taus="0.1 0.5,0.5, 3", ks="1,2", problems=4.0), models=[EMBEDDED_LABEL])
    assert p == SweepParams(EMBEDDED_LABEL, "word problems", (0.1, 0.5, 3.0), (1, 2), 4,
                            DecodeConfig(gen_len=32, block_len=16))
    assert p.config.steps is None and p.config.threshold is None and p.config.temperature == 0  # greedy
    assert parse_list("2, 1, 2", RUN_CONTROLS["k"], 4) == (2, 1)  # duplicates dropped, order kept


def test_the_command_line_names_the_exact_taus_and_threshold() -> None:
    """repr, not %g: a tau of 1.0000001 is not 1, and the command must decode the points the tab did."""
    p = parse_sweep(sweep_args(taus="1.0000001, 0.5", threshold=0.93, gen_len=32, block_len=16),
                    models=[EMBEDDED_LABEL])
    args = shlex.split(cli_command(p, None, "cpu"))
    assert args[args.index("--tau") + 1] == "1.0000001,0.5"
    assert args[args.index("--threshold") + 1] == "0.93"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(taus=""), "at least one value for tau"),
        (dict(taus="0.5, abc"), "'abc' is not a number"),
        (dict(taus="13"), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got 13"),
        (dict(taus="nan"), "tau \\(EntropyCache\\): 'nan' is not a number \\(write each value plainly"),
        (dict(taus="inf"), "tau \\(EntropyCache\\): 'inf' is not a number"),
        (dict(taus="1_0"), "tau \\(EntropyCache\\): '1_0' is not a number"),
        (dict(taus="0.5,,2"), "tau \\(EntropyCache\\): a value is missing between two commas"),
        (dict(taus="0.5, 2,"), "a value is missing between two commas"),
        (dict(taus="-0"), "tau \\(EntropyCache\\): '-0' is not a value of its own: write 0"),
        (dict(taus="-0.5"), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got -0.5"),
        (dict(taus="0.5\udcff"), "'0.5\\\\udcff' is not a number"),
        (dict(taus=", ".join(str(t / 10) for t in range(9))), "At most 8 values for tau"),
        (dict(taus="0.5," * 100), "too long"),
        (dict(ks="1.5"), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got 1.5"),
        (dict(ks="1, 2, 3, 4, 5"), "At most 4 values for k"),
        (dict(problems=0), f"held-out prompts must be an integer in \\[1, {MAX_PROBLEMS}\\], got 0"),
        (dict(problems=MAX_PROBLEMS + 1), f"held-out prompts must be an integer in \\[1, {MAX_PROBLEMS}\\], got 51"),
        (dict(problems=2.5), "held-out prompts must be an integer in .*, got 2.5"),
        (dict(problems=True), "held-out prompts must be an integer in .*, got True"),
        (dict(model="/etc/passwd"), "Unknown model"),
        (dict(task="poems"), "Unknown task 'poems'; choose one of: stories, word problems, word problems, 4-shot, "
                             "your prompts"),
        (own(), "Type or paste your prompts, one per line \\(at most 20\\): the box is empty"),
        (dict(own(" ", "\t"), problems=0), "held-out prompts must be an integer"),  # every input is checked
        (own(*["tell a story ."] * (MAX_OWN_PROMPTS + 1)), "At most 20 prompts, one per line; got 21"),
        (own("tell a story .", "", "a " * 3001), "Line 3 of your prompts: The prompt is 6001 characters long; the "
                                                 "limit is 6000"),
        (own("x" * 150000), "Your prompts are 150000 characters long; the limit is 120020"),
        (dict(own(), prompts=["a"]), "Type or paste your prompts"),
        (dict(gen_len=30), "do not fit together: gen_len 30 is not a multiple of block_len 16"),
        (dict(steps=4, threshold=0.9), "Set steps to 0"),
        (dict(gen_len=100000), "gen length must be an integer in \\[1, 512\\], got 100000"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sweep(sweep_args(**overrides), models=[EMBEDDED_LABEL])


def test_your_prompts_are_the_boxs_lines_that_are_not_blank_and_other_tasks_ignore_the_box() -> None:
    p = parse_sweep(own(" tell a story about tom .", "", "  ", "mia has 7 marbles . how many ?  "),
                    models=[EMBEDDED_LABEL])
    assert p.prompts == ((1, "tell a story about tom ."), (4, "mia has 7 marbles . how many ?")) and p.count == 2
    assert [item.prompt for item in p.items()] == [prompt for _, prompt in p.prompts]
    assert all(item.reference is None for item in p.items()) and p.name(1) == "Line 4 of your prompts"
    held = parse_sweep(sweep_args(prompts="hello\n" * 100), models=[EMBEDDED_LABEL])
    assert held.prompts == () and held.count == 2


def test_each_task_sweeps_its_own_held_out_prompts() -> None:
    def items(task: str) -> list:
        return parse_sweep(sweep_args(task=task, problems=3), models=[EMBEDDED_LABEL]).items()

    assert items("stories") == held_out("stories", 3)
    assert items("word problems") == held_out("words", 3)
    assert items("word problems, 4-shot") == held_out("words", 3, shots=4)
    assert all(i.prompt.count("question :") == 5 for i in items("word problems, 4-shot"))


def test_a_model_that_cannot_read_the_task_is_told_before_any_decode(tmp_path) -> None:
    """A model whose vocabulary has only the word problems' words, asked for a sweep on stories."""
    from app.serving.registry import ModelRegistry, local_choice

    registry = ModelRegistry([local_choice(save_word_problems_model(tmp_path), "sums", "cpu")])
    s = sweep_tab(registry)
    out = list(s.run(**sweep_args(model="sums", task="stories"), metric="accuracy", request=ME))
    assert len(out) == 1
    assert "Held-out prompt 1: The model does not know 8 words of the prompt: 'tell', 'a', 'story'" in refusal(
        out[0], s)
    out = list(s.run(**own("mia has 7 marbles . how many marbles does mia have now ?", "", "tell a story .",
                           model="sums"), metric="accuracy", request=ME))
    assert "Line 3 of your prompts: The model does not know 3 words of the prompt: 'tell', 'a', 'story'" in refusal(
        out[0], s)
    assert not registry.is_loaded("sums") and len(s.ctx.board) == 0


def test_a_prompt_too_long_for_the_model_with_the_gen_length_is_named_before_decoding(registry) -> None:
    s = sweep_tab(registry)
    out = list(s.run(**own(STORIES[0], "a " * 900, gen_len=256, block_len=32), metric="accuracy", request=ME))
    assert "Line 2 of your prompts: the prompt (" in refusal(out[-1], s) and "exceed the model's 1024 positions" in (
        refusal(out[-1], s))
    assert len(s.ctx.board) == 0


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
    assert names == ["k = 1", "k = 2", "Pareto front", "vanilla", "picked"]  # the reference, named as the app names it
    assert [list(c) for c in fig.data[0].customdata] == [[0.5, 1], [3.0, 1]]
    assert list(fig.data[2].x) == [2.0, 3.0]  # (1.5, 0.7) is beaten by (2.0, 0.9)
    assert list(fig.data[4].x) == [3.0] and "3 prompts" in fig.layout.title.text
    with pytest.raises(ValueError, match="unknown metric"):
        pareto_figure(rows, "speed")
    meanings = fig.layout.annotations[0].text
    assert "x, speedup: the exact decoder's measured compute time" in meanings and "y, accuracy: the share" in meanings


def test_without_known_answers_accuracy_shows_agreement_and_first_divergence_has_its_own_scale() -> None:
    rows = [row("none", 1.0, 0.9), row("entropy", 2.0, 0.9, tau=0.5, k=1)]
    for r, first in zip(rows, (40, 12.5)):
        r.update(accuracy=None, agreement=0.75, first_divergence_median=first)
    fig = pareto_figure(rows, "accuracy")
    assert "no accuracy" in fig.layout.title.text and list(fig.data[0].y) == [0.75]
    assert fig.layout.yaxis.title.text.startswith("agreement")
    fig = pareto_figure(rows, "first divergence")
    assert list(fig.data[0].y) == [12.5] and fig.layout.yaxis.range[1] == pytest.approx(40 * 1.08)
    assert "y, first divergence: how many tokens the cached text matches" in fig.layout.annotations[0].text


def test_progress_bar_shows_decodes_and_problems() -> None:
    shown = progress_html(Progress(4, 15, 1, [], 5), 2)
    assert "4 of 15 decodes (the first 5 a warm-up, untimed), 1 of 2 prompts done" in shown
    assert 'value="4" max="15"' in shown


# ---- the sweep itself, against evaluation.bench -----------------------------------------------------------


def test_a_sweep_of_stories_decodes_them_as_the_model_declares(registry) -> None:
    """The embedded model samples its stories (temperature 0.7, its config.json): a sweep of held-out
    stories does too, as `bench --task stories` would; word problems and your own prompts stay greedy."""
    model, _ = registry.get(EMBEDDED_LABEL)
    stories = parse_sweep(sweep_args(task="stories"), models=registry.labels)
    assert stories.config.temperature == 0.0 and stories.decode_config(model.config).temperature == 0.7
    assert stories.decode_config(model.config).gen_len == stories.config.gen_len  # the sweep's own controls stay
    words = parse_sweep(sweep_args(), models=registry.labels)
    assert words.decode_config(model.config) == words.config


def test_streamed_sweep_ends_on_the_rows_core_bench_gives_for_the_same_settings(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    params = parse_sweep(sweep_args(), models=registry.labels)
    snaps = list(params.snapshots(model, tokenizer))
    assert [s.decodes for s in snaps] == list(range(1, 10)) and snaps[-1].total == 9  # (1 warm-up + 2) x 3
    direct = sweep(model, tokenizer, held_out("words", 2), [0.5, 3.0], [2], params.config)
    assert exact(snaps[-1].rows) == exact(direct)
    polls = iter([False, True])
    stopped = list(params.snapshots(model, tokenizer, should_stop=lambda: next(polls)))
    assert [s.decodes for s in stopped] == [1, 2]


def test_the_handler_streams_progress_then_plot_and_table_and_loads_a_point(registry) -> None:
    s = sweep_tab(registry)
    out = list(s.run(**sweep_args(), metric="accuracy", request=ME))
    status, downloads = s.panels.status, s.panels.downloads
    assert all(set(o) <= set(s.panels.outputs()) for o in out) and len(s.ctx.board) == 0
    assert sum("<progress" in o[status] for o in out) == 9
    # the final banner comes with the whole result again, and the downloads
    assert {c: v for c, v in out[-1].items() if c is not downloads} | {status: ""} == out[-2] | {status: ""}
    p = s.panels
    banner, fig, table, files, result = (out[-1][c] for c in (status, p.plot, p.table, downloads, p.result))
    assert out[0][p.point].startswith("Click a point") and out[0][downloads] is None  # a new sweep clears both
    assert isinstance(fig, go.Figure) and isinstance(result, SweepResult) and len(files) == 3
    assert isinstance(table, pd.DataFrame) and list(table.columns) == TABLE_HEADERS
    assert list(table["policy"]) == ["vanilla", "entropy", "entropy"] and list(table["tau"])[1:] == [0.5, 3.0]
    assert list(table["repeats"]) == ["-"] * 3  # word problems: no story events to repeat
    assert "Sweep done: 2 prompts" in banner and "python -m evaluation bench --task words --n 2 --policies" in banner
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    direct = sweep(model, tokenizer, held_out("words", 2), [0.5, 3.0], [2], result.params.config)
    assert exact(result.rows) == exact(direct)

    picked = s.pick_point(json.dumps([3.0, 2, 123]), "accuracy", result)
    assert loaded(picked, s) == [3.0, 2, 3.0, 2]
    assert "tau 3, k 2" in picked[s.panels.loaded] and picked[s.panels.result].selected == (3.0, 2)
    assert "decoded word problems with gen length 32, block length 16, one token per step." in picked[s.panels.loaded]
    at_threshold = replace(result, params=replace(result.params, config=replace(result.params.config, threshold=0.9)))
    said = s.pick_point("[3.0, 2]", "accuracy", at_threshold)[s.panels.loaded]
    assert "block length 16, parallel decoding (threshold 0.9)." in said
    assert picked[s.panels.plot].data[-1].name == "picked" and "<b>tau 3, k 2</b>" in picked[s.panels.point]
    assert status not in picked
    graded = ["graded pass" if p["correct"] else "graded fail" for p in result.rows[2]["per_prompt"]]
    assert re.findall("graded (?:pass|fail)", picked[s.panels.point]) == graded  # word problems have known answers
    picked = s.pick_row("agreement", result, SimpleNamespace(index=[1, 0]))
    assert loaded(picked, s) == [0.5, 2, 0.5, 2]
    assert "exact decoder" in s.pick_row("accuracy", result, SimpleNamespace(index=[0, 3]))[s.panels.loaded]
    assert s.redraw("agreement", result)[s.panels.plot].layout.yaxis.title.text.startswith("agreement")
    assert "Unknown y axis 'speed'" in refusal(s.redraw("speed", result), s)
    assert "Unknown y axis 'speed'" in refusal(s.pick_point("[0.5, 2, 1]", "speed", result), s)
    assert "Unknown y axis" in refusal(s.pick_row("speed", result, SimpleNamespace(index=[1, 0])), s)
    for row in (True, 9, -1, "1"):  # a client's row: True is no row 1
        said = refusal(s.pick_row("accuracy", result, SimpleNamespace(index=[row, 0])), s)
        assert f"There is no row {row!r} in this session's sweep" in said
    for bad, message in (("[13, 2]", "in [0, 12], got 13"), ("[0.5, 1.5]", "must be an integer in"),
                         ("oops", "must be [tau, k]"),  # the issue: never the json parser's own text
                         ("[0.5]", "must be [tau, k]"), ('["a", 2]', "must be a number")):
        assert message in refusal(s.pick_point(bad, "accuracy", result), s)


def test_the_handler_refuses_bad_inputs_in_the_status_line_and_a_stop_ends_the_sweep(registry) -> None:
    s = sweep_tab(registry)
    me = ME
    for bad, metric, message in ((sweep_args(ks="1 2 3 4 5"), "accuracy", "At most 4 values for k"),
                                 (sweep_args(), "speed", "Unknown y axis"),
                                 (own("tell a story about tom .", "<b>hello</b>"), "accuracy",
                                  "Line 2 of your prompts: The model does not know")):
        out = list(s.run(**bad, metric=metric, request=me))
        assert len(out) == 1 and message in refusal(out[0], s) and len(s.ctx.board) == 0
    # what this tab offers in place of an unreadable line: its held-out sets (it has no example prompts)
    assert refusal(out[0], s).endswith(f"{registry.choice(EMBEDDED_LABEL).trained_on}: {HELD_OUT_INSTEAD}")
    shown = out[0][s.panels.status]  # a visitor's words are text in the status line, never HTML
    assert "'&lt;', 'b', '&gt;', 'hello', '&lt;/'" in shown and "</" not in shown.removesuffix("</div>")
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
    assert "Sweep done: 1 prompt" in out[-1][s.panels.status] and len(sent) == 1
    choice, flag, job = sent[0]
    assert choice.label == "gpu" and isinstance(flag, StopFlag)
    assert isinstance(job, SweepJob) and job.params.model == "gpu" and len(job.prompt_ids) == 1


# ---- your prompts: the texts of a point, the downloads, the command line ------------------------------


@pytest.fixture(scope="module")
def own_sweep(registry) -> tuple[SweepTab, dict]:
    """Three story prompts of your own at tau 0.5 and 12 (all but the blocks' first steps partial), gen 32."""
    s = sweep_tab(registry)
    out = list(s.run(**own(*STORIES, taus="0.5, 12", ks="2", gen_len=32, block_len=16), metric="agreement",
                     request=SimpleNamespace(session_hash="own")))
    return s, out[-1]


def test_your_prompts_sweep_has_agreement_and_first_divergence_but_no_accuracy(own_sweep) -> None:
    s, last = own_sweep
    result = last[s.panels.result]
    none, low, high = result.rows
    assert [r["accuracy"] for r in result.rows] == [None] * 3 and list(last[s.panels.table]["accuracy"]) == ["-"] * 3
    assert [p["prompt"] for p in high["per_prompt"]] == STORIES and high["n"] == 3
    for r in result.rows:
        firsts = sorted(p["first_divergence"] for p in r["per_prompt"])
        assert r["first_divergence_median"] == firsts[1]  # the middle one of three
        for p, ref in zip(r["per_prompt"], none["per_prompt"]):
            parted = next((i for i, (a, b) in enumerate(zip(ref["tokens"], p["tokens"])) if a != b), None)
            assert p["first_divergence"] == (min(len(p["tokens"]), len(ref["tokens"])) if parted is None else parted)
            assert p["identical"] == (p["tokens"] == ref["tokens"]) and p["correct"] is None
    assert not all(p["identical"] for p in high["per_prompt"])  # tau 12 changes some text: the view has a difference
    assert "Sweep done: 3 prompts, decoded greedily (temperature 0)." in last[s.panels.status]
    # asked for accuracy, the plot draws agreement (no right answers here) and the y axis radio says so
    redrawn = s.redraw("accuracy", result)
    assert redrawn[s.panels.metric] == "agreement" and "no accuracy" in redrawn[s.panels.plot].layout.title.text


def test_a_picked_point_shows_each_prompts_texts_side_by_side_with_every_difference_marked(own_sweep) -> None:
    s, last = own_sweep
    result = last[s.panels.result]
    none, high = result.rows[0], result.rows[2]
    point = s.pick_point("[12, 2, 7]", "agreement", result)[s.panels.point]
    cards = point.split('<div class="ec-prompt" id="sweep-prompt-')[1:]
    assert len(cards) == 3 and "<b>tau 12, k 2</b>" in point
    # the head says, prompt by prompt, the tokens each text shares before it parts (the card's "at token" is the
    # next one), and their median, the plot's first divergence
    each = ", ".join(f"{'all ' if ours['identical'] else ''}{ours['first_divergence']} (prompt {i + 1})"
                     for i, ours in enumerate(high["per_prompt"]))
    assert (f"Tokens the same before the texts part: {each}; median {high['first_divergence_median']:g} (a text "
            "that never parts counts whole).") in point
    for card, ref, ours in zip(cards, none["per_prompt"], high["per_prompt"]):
        assert html.escape(ours["prompt"]) in card
        exact_col, cached_col = card.split('<div class="ec-col-head">')[1:]
        assert exact_col.startswith("exact decoder") and cached_col.startswith("EntropyCache tau 12, k 2")
        for column, tokens, other in ((exact_col, ref["tokens"], ours["tokens"]), (cached_col, ours["tokens"],
                                                                                     ref["tokens"])):
            words = re.findall(r'<span class="ec-tok( ec-diff)?( ec-parted)?" title="token (\d+)">', column)
            assert len(words) == len(tokens)
            assert [bool(d) for d, _, _ in words] == [i >= len(other) or other[i] != t for i, t in enumerate(tokens)]
            first = ours["first_divergence"]
            flagged = [first] if not ours["identical"] and first < len(tokens) else []
            assert [int(i) - 1 for _, f, i in words if f] == flagged  # titled from 1
        in_text = f"{ours['agreement_in_text']:.3f} over the exact decoder's answer"
        assert f"agreement {ours['agreement']:.3f} ({in_text})" in card
        if ours["identical"]:
            assert "the same text as the exact decoder" in card
        else:
            n, m, first = len(ref["tokens"]), len(ours["tokens"]), ours["first_divergence"]
            assert (f"the exact decoder's {n} tokens, then {m - first} more" if first == n else
                    f"stops after the first {first} of the exact decoder's {n} tokens" if first == m else
                    f"parts from the exact decoder's text at token {first + 1} of {n}") in card  # counted from 1
        forced, by_entropy = ours["full_steps_forced_at"], ours["full_steps_entropy_at"]
        assert f"{len(by_entropy)} by entropy" in card and f"{len(forced)} forced (steps 0, 16)" in card
        assert card.count('class="ec-step-forced"') == 2 and card.count('class="ec-step-entropy"') == len(by_entropy)


def test_the_held_out_count_shows_only_while_a_held_out_set_is_picked(registry) -> None:
    s = sweep_tab(registry)
    assert s.on_task(OWN_PROMPTS)[s.problems].visible is False  # your prompts are the box's lines
    assert all(s.on_task(task)[s.problems].visible is True for task in SOURCES if task != OWN_PROMPTS)
    assert "Unknown task 'poems'" in refusal(s.on_task("poems"), s)


def test_lower_and_higher_tau_move_along_the_points_of_the_picked_k_showing_the_same_prompts(own_sweep) -> None:
    s, last = own_sweep
    result = last[s.panels.result]
    assert neighbour(result.rows, None, 1) == (0.5, 2) and neighbour(result.rows, (12.0, 2), 1) == (12.0, 2)
    high = s.pick_point("[12, 2, 1]", "agreement", result)
    low = s.move(-1, "agreement", high[s.panels.result])
    assert low[s.panels.result].selected == (0.5, 2) and loaded(low, s) == [0.5, 2, 0.5, 2]
    assert "<b>tau 0.5, k 2</b>" in low[s.panels.point]
    prompts = [re.findall(r'<span class="ec-prompt-text">(.*?)</span>', o[s.panels.point]) for o in (high, low)]
    assert prompts[0] == prompts[1] == [html.escape(p) for p in STORIES]
    assert s.move(1, "agreement", None)[s.panels.point].startswith("Run a sweep first")
    lowest = s.move(-1, "agreement", low[s.panels.result])  # nothing lower: said, the point stays
    assert lowest[s.panels.result].selected == (0.5, 2)
    assert lowest[s.panels.loaded].startswith("No lower tau at k 2: tau 0.5 is this sweep's lowest. Loaded")
    highest = s.move(1, "agreement", high[s.panels.result])
    assert highest[s.panels.loaded].startswith("No higher tau at k 2: tau 12 is this sweep's highest.")


def parsed_csv(path: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def cell(value) -> str:
    """How the CSV writes a value of a row: lists space-separated, None empty."""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def test_the_downloads_parse_back_into_the_sweeps_rows_and_texts(own_sweep) -> None:
    s, last = own_sweep
    rows = last[s.panels.result].rows
    points, texts, everything, prompts = sorted(last[s.panels.downloads], key=lambda p: ("points" not in p,
                                                                                         "texts" not in p, p))
    assert "sweep-points" in points and "sweep-texts" in texts and everything.endswith(".json")
    assert Path(prompts).read_text().splitlines() == STORIES
    record = json.loads(Path(everything).read_text())
    assert record["format"] == SWEEP_FORMAT and record["rows"] == json.loads(json.dumps(rows))
    assert record["settings"]["prompts"] == STORIES and record["settings"]["taus"] == [0.5, 12.0]
    lines = parsed_csv(points)
    assert [(line["policy"], line["tau"], line["k"]) for line in lines] == [("none", "", ""), ("entropy", "0.5", "2"),
                                                                           ("entropy", "12.0", "2")]
    for line, r in zip(lines, rows):
        assert float(line["speedup"]) == r["speedup"] and line["accuracy"] == ""
        assert {k: v for k, v in line.items() if k not in ("tau", "k")} == {
            k: cell(v) for k, v in r.items() if k not in ("params", "per_prompt")}
    lines = parsed_csv(texts)
    assert len(lines) == 9 and [line["prompt_index"] for line in lines] == ["1", "2", "3"] * 3
    records = [(r, p) for r in rows for p in r["per_prompt"]]
    for line, (r, p) in zip(lines, records):
        assert line["label"] == r["label"] and line["text"] == p["text"] and line["prompt"] == p["prompt"]
        assert int(line["first_divergence"]) == p["first_divergence"] and float(line["agreement"]) == p["agreement"]
        assert [int(x) for x in line["full_steps_entropy_at"].split()] == p["full_steps_entropy_at"]
        assert "tokens" not in line  # in the JSON


def test_the_command_line_the_tab_names_gives_the_same_rows(own_sweep, registry, tmp_path, capsys) -> None:
    """`python -m evaluation bench --prompts FILE ...` as the tab's banner says it, on the prompts it downloads."""
    s, last = own_sweep
    command = re.search(r"<code>(.*)</code>", last[s.panels.status]).group(1)
    prompts = next(p for p in last[s.panels.downloads] if p.endswith(".txt"))
    args = [{"prompts.txt": prompts, "rows.json": str(tmp_path / "rows.json")}.get(a, a)
            for a in shlex.split(html.unescape(command))]
    assert args[:4] == ["python", "-m", "evaluation", "bench"] and "--prompts" in args
    assert cli.main([*args[3:], "--model", registry.choice(EMBEDDED_LABEL).source]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert exact(rows) == exact(json.loads(json.dumps(last[s.panels.result].rows)))
    assert "entropy(tau=12.0, k=2)" in capsys.readouterr().out


def test_a_sweep_tokenizes_each_prompt_once_and_looks_its_model_up_once(registry, monkeypatch) -> None:
    """The prompt check's ids are the ones decoded (the tab, then the bench, take them as they are), and
    the model picked is looked up once, when the sweep is checked."""
    import app.serving.registry
    import app.sweep.tab
    import evaluation.bench

    tokenized, looked_up = [], []
    for module in (app.serving.registry, app.sweep.tab, evaluation.bench):
        def counted(tokenizer, prompt, real=module.chat_prompt_ids):
            tokenized.append(prompt)
            return real(tokenizer, prompt)

        monkeypatch.setattr(module, "chat_prompt_ids", counted)
    choice = registry.choice
    monkeypatch.setattr(registry, "choice", lambda label: looked_up.append(label) or choice(label))
    s = sweep_tab(registry)
    looked_up.clear()  # building the tab reads the first model's lengths
    out = list(s.run(**sweep_args(), metric="accuracy", request=SimpleNamespace(session_hash="once")))
    assert "Sweep done: 2 prompts" in out[-1][s.panels.status]
    assert sorted(tokenized) == sorted(item.prompt for item in held_out("words", 2)) and looked_up == [EMBEDDED_LABEL]
