"""The app's pure parts, on CPU: fair race, streaming vs a direct core decode, validation, HTML, models, cancel.

The model is the embedded one unless ENTROPYCACHE_MODEL names another checkpoint folder of the same format.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import importlib.util
import json
import multiprocessing
import os
import pickle
import re
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import plotly.graph_objects as go
import pytest
import torch
from serving_stubs import fake_zero_gpu

import app.controls.panel
import app.serving.downloads
import app.serving.gpu
import app.serving.registry
import app.ui
from app.controls.declared import PEER_CONTROLS, RUN_CONTROLS, compared_policies, raced_policies
from app.controls.panel import raw_slider
from app.controls.run import MAX_PROMPT_CHARS, RawRun, check_run
from app.race.comparison import Comparison, LaneLabel
from app.race.decode import race, race_snapshots
from app.race.render import RaceRenderer
from app.race.speed import SUMMARY_HEADERS
from app.race.tab import RaceTab, build_race_tab
from app.race.trace import TRACE_DIR, write_trace
from app.serving.context import AppContext
from app.serving.examples import Example
from app.serving.registry import EMBEDDED_LABEL, ModelChoice, ModelRegistry, build_registry, extra_dirs_from_env
from app.serving.sessions import RunBoard, StopFlag
from app.widgets.lane_plots import step_axis
from app.widgets.text_view import TokenText, render_text
from app.widgets.throttle import DEFAULT_THROTTLE_S
from core.config import DEFAULT_BLOCK_LEN, DEFAULT_GEN_LEN
from core.decoder import DecodeConfig, generate
from core.events import StepEvent, Totals
from core.loading import EMBEDDED, answer_text, chat_prompt_ids, read_config
from core.policies import POLICIES, make_policy
from evaluation.tasks.word_problems import make_split

MODEL = os.environ.get("ENTROPYCACHE_MODEL")  # None: the shipped embedded model
PROMPT = make_split("test", 1)[0].prompt


def controls(**overrides) -> dict:
    values = {key: control.default for key, control in RUN_CONTROLS.items()}
    values.update(gen_len=32, block_len=16)
    values.update(overrides)
    return values


def race_run(registry, prompt: object = PROMPT, model: object = EMBEDDED_LABEL, policy: object = "none",
             compared: dict | None = None, **numbers):
    """check_run as the Race tab calls it, with every control at its default unless given."""
    return check_run(registry, RawRun(prompt, model, policy, controls(**numbers), compared or {}), raced_policies(),
                     against_ours=True)


def stream_race(model, tokenizer, params, *, throttle_s: float = DEFAULT_THROTTLE_S, trace_dir=TRACE_DIR):
    """One rendered Update per snapshot of the race (the Race tab's stream, without the session's run)."""
    renderer = RaceRenderer(model, tokenizer, params, trace_dir)
    for snap in race_snapshots(model, renderer.prompt_ids, params, throttle_s):
        yield renderer.update(snap)


def race_tab(registry: ModelRegistry, board: RunBoard, throttle_s: float = 0) -> RaceTab:
    """The Race tab as the app builds it."""
    with gr.Blocks():
        return build_race_tab(AppContext(registry, board, throttle_s=throttle_s))


# ---- the race ---------------------------------------------------------------------------------------


def fake_decoder(costs: list[float], closed: list[str] | None = None, name: str = ""):
    try:
        for i, cost in enumerate(costs):
            yield StepEvent(
                step=i,
                block=0,
                prompt_len=1,
                tokens=[],
                unmasked=[1 + i],
                unmasked_tokens=[5],
                entropies=[0.0],
                max_entropy=0.0,
                full=False,
                reason="",
                rows=[],
                layer_rows=[],
                compute_s=cost,
                decision_s=0.0,
                done=i == len(costs) - 1,
            )
    finally:
        if closed is not None:
            closed.append(name)


def test_race_always_steps_the_lane_behind_and_the_cheaper_one_finishes_first() -> None:
    snaps = list(race([fake_decoder([1.0] * 4), fake_decoder([0.5] * 4)], ["slow", "fast"]))
    assert len(snaps) == 8  # throttle 0: one snapshot per step of either lane
    clocks = [(0.0, 0.0)] + [tuple(la.clock for la in s.lanes) for s in snaps]
    for before, snap in zip(clocks, snaps):
        other = 1 - snap.stepped
        if not snap.lanes[other].done:
            assert before[snap.stepped] <= before[other]  # never step the lane that is ahead
    slow, fast = snaps[-1].lanes
    assert (slow.clock, fast.clock) == (4.0, 2.0)
    assert fast.finish_rank == 1 and slow.finish_rank == 2 and snaps[-1].finished


def test_race_throttles_snapshots_on_wall_time_but_keeps_finishes_and_the_end() -> None:
    ticks = iter(i * 0.1 for i in range(1000))
    snaps = list(
        race(
            [fake_decoder([1.0] * 10), fake_decoder([1.0] * 10)],
            ["a", "b"],
            throttle_s=0.35,
            wall_clock=lambda: next(ticks),
        )
    )
    assert 5 <= len(snaps) < 20
    assert sum(la.clock for la in snaps[-1].lanes) == 20.0 and snaps[-1].finished
    assert sum(1 for s in snaps if any(la.done for la in s.lanes)) >= 2  # the first finish is never skipped


def _steps_between_renders(render_s: float, throttle_s: float = 0.35) -> list[int]:
    """Steps of 0.1 s wall time each, two lanes of 30; the caller takes render_s over every snapshot.
    The steps taken between two throttled snapshots (not those a finish forced)."""
    now = [0.0]

    def stepping(n: int):
        for event in fake_decoder([1.0] * n):
            now[0] += 0.1  # a step's wall time
            yield event

    snaps = []
    for snap in race([stepping(30), stepping(30)], ["a", "b"], throttle_s=throttle_s, wall_clock=lambda: now[0]):
        snaps.append(snap)
        now[0] += render_s  # rendering the snapshot
    steps = [sum(len(la.events) for la in s.lanes) for s in snaps]
    assert steps[-1] == 60 and snaps[-1].finished
    return [b - a for a, b, s in zip(steps, steps[1:], snaps[1:]) if not any(la.done for la in s.lanes)]


def test_the_throttle_window_opens_when_the_caller_has_rendered() -> None:
    """However long a render takes, throttle_s of decoding comes between two of them."""
    assert set(_steps_between_renders(0.01)) == {4}  # 0.4 s of steps: the first tick past 0.35 s


def test_a_costly_render_widens_the_window_to_four_times_its_cost() -> None:
    """Rendering never takes more than a fifth of the wall time: a 0.22 s render is followed by 0.88 s
    of decoding (9 steps of 0.1 s) before the next snapshot, not 0.35 s."""
    assert set(_steps_between_renders(0.22)) == {9}
    assert set(_steps_between_renders(0.22, throttle_s=0)) == {1}  # 0: every step, whatever a render costs


def test_race_stop_ends_it_and_closes_both_decoders() -> None:
    closed: list[str] = []
    n = iter(range(100))
    snaps = list(
        race(
            [fake_decoder([1.0] * 10, closed, "a"), fake_decoder([1.0] * 10, closed, "b")],
            ["a", "b"],
            should_stop=lambda: next(n) >= 3,
        )
    )
    assert len(snaps) == 3 and not snaps[-1].finished
    assert sorted(closed) == ["a", "b"]


# ---- streaming against a direct core decode ------------------------------------------------------------


def direct(model, tokenizer, prompt: str, tau: float, k: int, **config) -> tuple[StepEvent, StepEvent]:
    ids = chat_prompt_ids(tokenizer, prompt)
    cfg = DecodeConfig(**config)
    ours = make_policy("entropy", tau=tau, k=k)
    return generate(model, ids, make_policy("none"), cfg), generate(model, ids, ours, cfg)


def test_stream_yields_every_step_with_all_four_parts_and_ends_on_the_core_tokens(registry, tmp_path) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    # tau above any entropy the vocabulary allows: EntropyCache takes partial steps after each block start
    params = race_run(registry, tau=10.0, k=2)
    updates = list(stream_race(model, tokenizer, params, throttle_s=0, trace_dir=tmp_path))
    ref_none, ref_ours = direct(model, tokenizer, PROMPT, 10.0, 2, gen_len=32, block_len=16)

    assert len(updates) == ref_none.totals.steps + ref_ours.totals.steps
    for u in updates:
        for lane, traces in zip(u.lanes, (["max entropy"], ["max entropy", "full step",
                                                           "tau = 10"])):
            assert "ec-speed" in lane.speed_html and "steps" in lane.speed_html
            assert 'class="ec-text"' in lane.text_html
            # the uncached exact decoder has no threshold and no full steps to mark
            assert isinstance(lane.entropy_fig, go.Figure) and [t.name for t in lane.entropy_fig.data] == traces
            assert [t.type for t in lane.rows_fig.data] == ["heatmap", "heatmap"]
    last = updates[-1]
    assert last.lanes[0].tokens == ref_none.tokens
    assert last.lanes[1].tokens == ref_ours.tokens
    assert ref_ours.totals.rows_fraction < 1.0 == ref_none.totals.rows_fraction  # the race was not trivial
    assert all(u.final is None for u in updates[:-1])

    final = last.final
    assert final.texts == tuple(answer_text(tokenizer, r) for r in (ref_none, ref_ours))
    trace = json.loads(final.trace_path.read_text())
    assert trace["settings"]["prompt"] == PROMPT and trace["prompt_ids"] == chat_prompt_ids(tokenizer, PROMPT)
    for lane, ref in zip(trace["lanes"], (ref_none, ref_ours)):
        assert len(lane["events"]) == ref.totals.steps
        assert lane["events"][-1]["tokens"] == ref.tokens
        assert lane["compute_s"] == pytest.approx(sum(e["compute_s"] for e in lane["events"]))
    # the speedup shown is the ratio of the measured compute clocks, nothing else
    base_s, ours_s = (lane["compute_s"] for lane in trace["lanes"])
    assert trace["speedup"] == pytest.approx(base_s / ours_s)
    assert final.summary[1][SUMMARY_HEADERS.index("speedup vs left")] == round(base_s / ours_s, 2)
    assert f"{base_s / ours_s:.2f}x" in last.banner_html


def test_stream_with_throttle_renders_far_fewer_updates_and_the_same_result(registry, tmp_path) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    params = race_run(registry, policy="dual", tau=10.0)
    updates = list(stream_race(model, tokenizer, params, throttle_s=60, trace_dir=tmp_path))
    assert len(updates) <= 3  # the first step, the first finish, the end
    ids = chat_prompt_ids(tokenizer, PROMPT)
    ref = generate(model, ids, make_policy("dual"), DecodeConfig(gen_len=32, block_len=16))
    assert updates[-1].lanes[0].tokens == ref.tokens and updates[-1].final is not None


def test_the_servers_graphs_setting_reaches_every_race_and_the_static_path_races_the_same(registry, tmp_path) -> None:
    """app.py --graphs: the registry carries it into every run's DecodeConfig; on the CPU 'on' races the
    padded passes a GPU would replay (both lanes alike), with the tokens of the exact rows."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    static = ModelRegistry([registry.choice(EMBEDDED_LABEL)], graphs="on")
    static._loaded = registry._loaded  # the same loaded model, without loading it again
    params = race_run(static, tau=10.0, k=2)
    assert params.config.graphs == "on" and race_run(registry).config.graphs == "auto"
    last = list(stream_race(model, tokenizer, params, throttle_s=60, trace_dir=tmp_path))[-1]
    ref_none, ref_ours = direct(model, tokenizer, PROMPT, 10.0, 2, gen_len=32, block_len=16)
    assert (last.lanes[0].tokens, last.lanes[1].tokens) == (ref_none.tokens, ref_ours.tokens)
    assert "CUDA graphs" not in last.banner_html  # nothing is captured on a CPU
    with pytest.raises(ValueError, match="graphs must be one of auto, on, off, got 'fast'"):
        ModelRegistry([], graphs="fast")


def test_the_status_line_tells_what_capturing_graphs_cost_and_no_lane_is_charged() -> None:
    from app.race.decode import Lane, Snapshot
    from app.race.speed import banner_html

    event = next(fake_decoder([0.5]))
    captured = dataclasses.replace(event, capture_s=0.25, totals=Totals(capture_s=0.25))
    lanes = (Lane("none", [event], 0.5, True, 2), Lane("ours", [captured], 0.25, True, 1))
    snap = Snapshot(lanes, 1, True, capture_s=1.5)
    assert snap.graphs_s == 1.75  # before the race, and a shape first met during it
    decoding = {p.name: None for p in DecodeConfig.parameters} | {"gen_len": 1, "block_len": 1}
    comparison = Comparison((LaneLabel("left", "none", decoding), LaneLabel("right", "ours", decoding)))
    text = banner_html(lanes, comparison, graphs_s=snap.graphs_s)
    assert "<b>2.00x</b>" in text and "CUDA graphs captured in 1.75 s, once for this length: on no lane's clock" in text
    assert "CUDA graphs" not in banner_html(lanes, comparison)
    failed = banner_html(lanes, comparison, graphs_failed="RuntimeError: operation not permitted when stream is "
                                                          "capturing")
    assert "<b>2.00x</b>" in failed and ("CUDA graphs could not be captured (RuntimeError: operation not permitted "
                                         "when stream is capturing): every lane runs eagerly.") in failed


def test_prompt_that_does_not_fit_the_model_is_refused_clearly(registry, tmp_path) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    prompt = "a " * 600  # 600 words the model knows
    longest = RUN_CONTROLS["gen_len"].slider_range[1]
    assert model.config.max_seq_len < 600 + longest  # else this test needs a longer prompt
    # 32 steps: within the work budget (app/serving/budget.py), so that core's own check is the one met
    too_long = race_run(registry, prompt, gen_len=longest, block_len=32, steps=32)
    with pytest.raises(ValueError, match="exceeds the model's"):  # core's own check, at the first step
        next(stream_race(model, tokenizer, too_long, trace_dir=tmp_path))


def test_with_a_threshold_the_plots_grow_with_the_steps_up_to_gen_len(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    run = race_run(registry, threshold=0.9)
    gen_len = run.config.gen_len
    renderer = RaceRenderer(model, tokenizer, run)
    assert renderer.layout.max_steps == gen_len
    assert renderer.empty("").lanes[0].entropy_fig.layout.xaxis.range == (-0.5, 7.5)
    assert [step_axis(n, gen_len) for n in (0, 8, 9, 17, gen_len)] == [8, 8, 16, 32, gen_len]
    assert step_axis(gen_len + 5, gen_len) == gen_len + 5  # never cuts a step off
    # steps cannot be set as well, whatever sends it: nothing could cut the plots short
    with pytest.raises(ValueError, match="steps and threshold cannot both be set"):
        dataclasses.replace(run.config, steps=2)


# ---- validation -----------------------------------------------------------------------------------------

BAD = [
    (dict(prompt=""), "prompt: it is empty"),
    (dict(prompt="   \n"), "prompt: it is empty"),
    (dict(prompt="x" * (MAX_PROMPT_CHARS + 1)), f"limit is {MAX_PROMPT_CHARS}"),
    (dict(prompt=None), "prompt: it is empty"),
    (dict(model="/etc/passwd"), "Unknown model"),
    (dict(policy="entropy"), "Unknown policy"),
    (dict(policy="../none"), "Unknown policy"),
    (dict(gen_len=100000), "gen length must be an integer in \\[1, 512\\], got 100000"),
    (dict(gen_len=0), "gen length must be an integer in \\[1, 512\\], got 0"),
    (dict(gen_len=32.5), "gen length must be an integer in \\[1, 512\\], got 32.5"),
    (dict(block_len=5), "do not fit together: gen_len 32 is not a multiple of block_len 5"),
    (dict(block_len=64), "do not fit together: block_len must be"),
    (dict(steps=3), "do not fit together: steps 3 must be a multiple of the number of blocks \\(2\\)"),
    (dict(steps=64), "do not fit together: steps must be .* got 64"),
    (dict(steps=2, threshold=0.9), "Set steps to 0 or the parallel-decoding threshold to 0"),
    (dict(tau=float("nan")), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got NaN"),
    (dict(tau=-1), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got -1"),
    (dict(k=2.5), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got 2.5"),
    (dict(threshold=1.5), "threshold must be a number in \\(0, 1\\], got 1.5"),
    (dict(temperature=float("inf")), "temperature must be a number in \\[0, 2\\], got inf"),
    (dict(seed=-1), "seed must be an integer in \\[0, 2147483647\\], got -1"),
    (dict(seed="7"), "seed must be an integer in \\[0, 2147483647\\], got '7'"),
    (dict(k=True), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got True"),
]


@pytest.mark.parametrize("bad, message", BAD, ids=[str(b)[:40] for b, _ in BAD])
def test_bad_inputs_are_refused_with_a_clear_message(registry, bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        race_run(registry, **bad)


def test_a_run_missing_a_control_or_naming_an_unknown_one_is_refused(registry) -> None:
    numbers = controls()
    del numbers["seed"]
    with pytest.raises(ValueError, match=re.escape("bad controls: missing ['seed'], unknown []")):
        check_run(registry, RawRun(PROMPT, EMBEDDED_LABEL, "none", numbers, {}), compared_policies(), True)
    with pytest.raises(ValueError, match=re.escape("bad controls: missing [], unknown ['dual_x']")):
        sent = dict(prompt=PROMPT, model=EMBEDDED_LABEL, policy="none", **controls(), dual_x=1)
        check_run(registry, RawRun.of(sent), compared_policies(), True)


def test_good_inputs_pass_unchanged_and_build_the_run_once(registry) -> None:
    p = race_run(registry, f"  {PROMPT}  ", policy="dllm-cache", steps=4, temperature=0.5, seed=7, tau=1.25, k=3)
    assert (p.prompt, p.settings["steps"], p.settings["threshold"], p.settings["seed"]) == (PROMPT, 4, 0.0, 7)
    assert (p.settings["k"], p.settings["tau"]) == (3, 1.25)
    assert (p.config.steps, p.config.threshold, p.config.temperature, p.config.seed) == (4, None, 0.5, 7)
    assert [policy.describe() for policy in p.policies] == [
        "dllm-cache(prompt_every=50, response_every=7, rho=0.25)", "entropy(tau=1.25, k=3)"]
    t = race_run(registry, threshold=0.9)
    assert (t.config.steps, t.config.threshold) == (None, 0.9)
    assert compared_policies()[0] == "none" and "entropy" not in compared_policies()


def test_the_compared_policy_gets_its_own_controls(registry) -> None:
    """Each compared policy's parameters are controls of their own (from the declarations): the
    chosen policy's values reach it, missing ones take defaults, and a bad value anywhere is refused
    with a message naming the control."""
    for name in compared_policies():
        own = [c for c in PEER_CONTROLS.values() if c.policy == name]
        assert [c.param for c in own] == list(POLICIES[name].parameters)
    p = race_run(registry, policy="dllm-cache", compared={"dllm_cache_rho": 0.5})
    assert p.settings["compared_params"] == {"prompt_every": 50, "response_every": 7, "rho": 0.5}
    assert p.policies[0].describe() == "dllm-cache(prompt_every=50, response_every=7, rho=0.5)"
    none = race_run(registry, policy="none", compared={"dllm_cache_rho": 0.5})
    assert none.settings["compared_params"] == {}
    for compared, message in [({"dllm_cache_rho": 2}, r"rho \(DLLMCache\) must be a number in \[0.05, 1\], got 2"),
                              ({"elastic_gamma": "x"}, r"gamma \(ElasticCache\) must be a number"),
                              ({"elastic_gama": 0.5}, "unknown \\['elastic_gama'\\]")]:
        with pytest.raises(ValueError, match=message):
            race_run(registry, policy="elastic", compared=compared)


def test_entropycache_controls_come_from_its_declared_parameters() -> None:
    declared = POLICIES["entropy"].parameters
    assert [p.name for p in declared] == ["tau", "k"] == list(RUN_CONTROLS)[:2]
    for p in declared:
        c = RUN_CONTROLS[p.name]
        assert c.param is p and c.slider_range == p.slider_range and c.default == p.default and c.info == p.help
        assert c.label.startswith(p.name)


def test_decode_controls_come_from_the_decode_settings_declarations() -> None:
    """gen length, block, steps, threshold, temperature, seed: DecodeConfig's declarations as controls;
    an optional one (steps, threshold) shows unset as 0, which no setting of it can be."""
    assert list(RUN_CONTROLS)[2:] == [p.name for p in DecodeConfig.parameters]
    for p in DecodeConfig.parameters:
        c = RUN_CONTROLS[p.name]
        assert c.param is p and c.label == (p.label or p.name) and p.help in c.info
        if p.default is None:
            assert c.default == 0 and c.slider_range == (0, p.slider_range[1]) and c.setting(c.check(0)) is None
            with pytest.raises(ValueError):
                p.check(0)  # no setting of it: on a slider, 0 can only mean unset
        else:
            assert c.slider_range == p.slider_range and c.default == p.default


def test_sliders_hand_values_on_as_sent_and_write_no_stub_file() -> None:
    slider = raw_slider(0, 12, value=0.5)
    assert slider.preprocess("abc") == "abc" and slider.preprocess(2**40) == 2**40 and slider.preprocess(None) is None
    assert slider.get_block_name() == "slider"  # drawn by gr.Slider's own browser component
    assert not list(Path(app.controls.panel.__file__).parent.glob("*.pyi"))  # gradio writes one per component subclass


UNREADABLE = [  # (prompt, the words the embedded model does not know)
    ("<|mask|> mia has 7 marbles . how many marbles does mia have now ?", "'<|', 'mask', '|>'"),
    ("What is 12 plus 7?", "'What', 'plus'"),
]


@pytest.mark.skipif(MODEL is not None, reason="the words are unknown to the embedded model's vocabulary")
@pytest.mark.parametrize(("prompt", "words"), UNREADABLE)
def test_a_prompt_the_model_cannot_read_is_refused_before_any_run(registry, prompt: str, words: str) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    out = list(h.run(**{**run_args(), "prompt": prompt}, request=SimpleNamespace(session_hash="me")))
    message = html.unescape(refusal(out, h.panels.status))
    assert words in message and registry.choice(EMBEDDED_LABEL).trained_on in message and len(board) == 0


def refusal(out: list[dict], status) -> str:
    """A refused run's one answer: the status line alone (the other panels stay as they were), as HTML."""
    assert len(out) == 1 and list(out[0]) == [status] and 'class="ec-banner ec-refused"' in out[0][status]
    return out[0][status]


@pytest.mark.skipif(MODEL is not None, reason="the words are unknown to the embedded model's vocabulary")
def test_the_prompt_check_of_a_model_not_loaded_yet_reads_only_its_tokenizer() -> None:
    fresh = build_registry(cuda=False)
    fresh.check_prompt(EMBEDDED_LABEL, PROMPT)
    with pytest.raises(ValueError, match="^The model does not know 1 word of the prompt: 'hello'.*trained only on"):
        fresh.check_prompt(EMBEDDED_LABEL, "hello")
    assert not fresh.is_loaded(EMBEDDED_LABEL)
    gpu = build_registry(cuda=True)
    for label in gpu.labels[1:]:  # hub models, not downloaded: their byte-level tokenizers read anything
        gpu.check_prompt(label, "<|mask|> hello")
        assert not gpu.is_loaded(label)


# ---- text view --------------------------------------------------------------------------------------------


class WordTokenizer:
    pieces = {0: "<|mask|>", 1: "<|eos|>", 5: "<script>&", 6: "ok"}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        words = [self.pieces[i] for i in ids if not (skip_special_tokens and i in (0, 1))]
        return " ".join(words)


def test_token_text_is_escaped_masks_shown_and_marks_applied() -> None:
    text = TokenText(WordTokenizer(), mask_id=0, eos_ids=(1,))
    assert text.sep == " "
    event = StepEvent(
        step=3,
        block=0,
        prompt_len=2,
        tokens=[5, 0, 6, 1, 1],
        unmasked=[4],
        unmasked_tokens=[6],
        entropies=[0.1],
        max_entropy=0.1,
        full=False,
        reason="",
        rows=[0, 3, 4],
        layer_rows=[3],
        compute_s=0.0,
        decision_s=0.0,
    )
    out = render_text(event, text, 5)
    assert "<script>" not in out and "&lt;script&gt;&amp;" in out
    assert out.count('class="ec-mask ec-rc"') == 1  # position 3 (response index 1): masked and recomputed
    assert '<span class="ec-tok ec-new ec-rc">ok</span>' in out
    assert "[end of text, 1 positions]" in out and "prompt rows recomputed 1/2" in out
    assert render_text(None, text, 4).split('class="ec-text">')[1].count('class="ec-mask"') == 4
    # An end-of-text decoded while masks stand before and after it: the positions after it are the tail
    tail = dataclasses.replace(event, tokens=[5, 0, 1, 0, 6], rows=[])
    out = render_text(tail, text, 5)
    assert out.count("ec-tail") == 2 + 1  # response indices 3 (masked) and 4, and the legend's
    assert '<span class="ec-mask ec-tail"></span> <span class="ec-tok ec-tail">ok</span>' in out
    assert '<span class="ec-mask"></span> <span class="ec-tok ec-new">&lt;|eos|&gt;</span>' in out  # up to it: no tail


# ---- models -------------------------------------------------------------------------------------------------


def test_an_example_sets_the_decode_settings_its_model_declares_for_its_task(registry) -> None:
    """The embedded model declares temperature 0.7 for stories: its first example, a story, opens the Drift
    panel at 0.7; a word problem after it is greedy again; every example sets the lengths, to its own (a
    long chat prompt: the paper's 256 or 512, block 32) or else the model's; a chat model declares no
    temperature. The Race opens on the paper's comparison, on the model's long example."""
    from app.controls.panel import declared_controls, example_controls
    from app.drift.tab import build_drift_tab
    from app.serving.examples import chat_examples

    choice = registry.choice(EMBEDDED_LABEL)
    tasks = ["stories" if e.startswith("tell a story") else "words" for e in choice.examples]
    assert tasks[0] == "stories" and "words" in tasks
    keys = declared_controls(registry)
    assert keys == ["block_len", "gen_len", "temperature"]
    lengths = {"gen_len": choice.gen_len, "block_len": choice.block_len}
    assert [example_controls(choice, i, keys) for i in range(len(tasks))] == [
        {**lengths, "temperature": 0.7 if task == "stories" else 0.0} for task in tasks]
    # a model that declares nothing resets what another one declared: switching to it is greedy again
    chat = ModelChoice("chat", "x", "cuda", 128, 32, chat_examples())
    long, short = chat.paper_example, len(chat.examples) - 1
    assert example_controls(chat, long, keys) == {"gen_len": 256, "block_len": 32, "temperature": 0.0}
    assert example_controls(chat, short, keys) == {"gen_len": 128, "block_len": 32, "temperature": 0.0}
    with gr.Blocks():
        drift = build_drift_tab(AppContext(registry, RunBoard()))
    assert drift.inputs.controls["temperature"].value == 0.7 and drift.inputs.prompt.value == choice.examples[0]
    race = race_tab(registry, RunBoard())
    assert race.inputs.prompt.value == choice.examples[choice.paper_example] and "4 worked examples" in (
        choice.example_list[choice.paper_example].title)
    assert race.inputs.policy.value == "vanilla" and race.inputs.controls["threshold"].value == 0.9
    assert race.inputs.controls["temperature"].value == 0.0


def test_model_list_is_fixed_on_the_server(monkeypatch, tmp_path) -> None:
    folder = MODEL or str(build_registry(cuda=False).choice(EMBEDDED_LABEL).source)
    cpu = build_registry(embedded=folder, cuda=False)
    assert cpu.labels == [EMBEDDED_LABEL]
    gpu = build_registry(embedded=folder, cuda=True)
    assert any("LLaDA-8B-Instruct" in label for label in gpu.labels)
    assert any("Dream-7B-Instruct" in label for label in gpu.labels)
    assert {gpu.choice(label).source for label in gpu.labels[1:]} == {"llada", "dream"}
    monkeypatch.setenv("ENTROPYCACHE_MODELS", os.pathsep.join([folder, folder]))
    extra = build_registry(extra_dirs_from_env(), embedded=folder, cuda=False)
    assert len(extra.labels) == 2 and extra.labels[1].endswith("(local, CPU)")
    for label in ("/etc/passwd", folder, "llada"):
        with pytest.raises(ValueError, match="Unknown model"):
            cpu.choice(label)
    with pytest.raises(ValueError, match="no config.json"):
        build_registry([str(tmp_path)], embedded=folder, cuda=False)


def test_decode_defaults_come_from_the_checkpoint_config_or_cores_defaults() -> None:
    folder = MODEL or str(EMBEDDED)
    config, _, _ = read_config(Path(folder))
    reg = build_registry(embedded=folder, cuda=True)
    first = reg.choice(EMBEDDED_LABEL)
    assert (first.gen_len, first.block_len) == (config.gen_len, config.block_len)
    for label in reg.labels[1:]:
        assert (reg.choice(label).gen_len, reg.choice(label).block_len) == (DEFAULT_GEN_LEN, DEFAULT_BLOCK_LEN)


def test_models_are_loaded_once(registry) -> None:
    assert registry.get(EMBEDDED_LABEL) is registry.get(EMBEDDED_LABEL)
    examples = registry.choice(EMBEDDED_LABEL).examples
    assert len(examples) >= 3 and all("how many" in e or e.startswith("tell a story") for e in examples)


def test_gpu_models_are_evicted_oldest_first_beyond_the_limit(monkeypatch) -> None:
    loads: list[str] = []

    def fake_load(source: str, device: str, fusion: str):
        loads.append(source)
        return object(), source

    monkeypatch.setattr(app.serving.registry, "load_model", fake_load)
    choices = [ModelChoice(f"m{i}", f"src{i}", "cuda", 8, 8, (Example("x", "x", {}),)) for i in range(3)]
    one = ModelRegistry(choices)
    first = one.get("m0")
    assert one.get("m0") is first and loads == ["src0"]
    one.get("m1")
    assert not one.is_loaded("m0") and one.is_loaded("m1")
    two = ModelRegistry(choices, max_gpu_models=2)
    for label in ("m0", "m1", "m2"):
        two.get(label)
    assert [two.is_loaded(f"m{i}") for i in range(3)] == [False, True, True]


# ---- cancellation -----------------------------------------------------------------------------------------


def run_args(**overrides) -> dict:
    """A Race run's inputs by name, as the panel sends them."""
    return dict(prompt=PROMPT, model=EMBEDDED_LABEL, policy="none", **controls(**overrides))


def test_a_new_run_or_stop_in_the_same_session_cancels_the_run_in_flight(registry) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    me, other = SimpleNamespace(session_hash="me"), SimpleNamespace(session_hash="other")
    long = dict(gen_len=256, block_len=32)
    first = h.run(**run_args(**long), request=me)
    theirs = h.run(**run_args(**long), request=other)
    for _ in range(3):
        next(first)
    assert "Waiting for the model" in next(theirs)[h.panels.status]  # told once; asked again it would wait its turn
    second = h.run(**run_args(**long), request=me)
    next(second)  # starting it cancels `first` before its next step
    assert list(first) == []
    assert "Stopped." in h.ctx.stop(me)
    rest = list(second)  # no further step; one last banner, so no late update hides the stop
    assert len(rest) == 1 and "Stopped." in rest[0][h.panels.status]
    assert next(theirs)  # another session's run goes on
    theirs.close()
    assert len(board) == 0


def test_a_run_replaced_before_its_first_step_stops_instead_of_taking_its_successors_flag(registry) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    me = SimpleNamespace(session_hash="me")
    long = dict(gen_len=256, block_len=32)
    first = h.run(**run_args(**long), request=me)
    next(first)  # "Starting...": registered, no decoder started yet (where an 8B model would still load)
    second = h.run(**run_args(**long), request=me)
    next(second)  # registers `second` under the same session, which flags `first`
    assert list(first) == []  # not one step after it was replaced
    assert next(second, None) is not None  # the new run streams on
    second.close()
    assert len(board) == 0


OUT_OF_RANGE = [
    (dict(gen_len=100000), "gen length must be an integer in \\[1, 512\\], got 100000"),
    (dict(temperature=-1), "temperature must be a number in \\[0, 2\\], got -1"),
    (dict(tau=1e9), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got 1000000000.0"),
    (dict(steps=2, threshold=0.9), "Set steps to 0 or the parallel-decoding threshold to 0"),
]


@pytest.mark.parametrize("bad, message", OUT_OF_RANGE, ids=[str(b) for b, _ in OUT_OF_RANGE])
def test_the_run_handler_itself_refuses_out_of_range_values(registry, bad: dict, message: str) -> None:
    """What an API client gets past Gradio's slider bounds still meets the handler's own checks."""
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    out = list(h.run(**run_args(**bad), request=SimpleNamespace(session_hash="me")))
    assert re.search(message, html.unescape(refusal(out, h.panels.status)))
    assert len(board) == 0  # refused before any run was registered


def test_on_zero_gpu_the_worker_gets_a_pickled_copy_of_the_stop_flag_and_a_stop_reaches_it(gpu_registry) -> None:
    # spaces.GPU pickles the arguments into a forked worker: the race there polls only a copy of the flag
    board = RunBoard()
    h = race_tab(gpu_registry, board, throttle_s=60)
    sent = fake_zero_gpu(h.runner)
    me = SimpleNamespace(session_hash="z")
    out = list(h.run(**{**run_args(), "model": "gpu"}, request=me))
    assert "finished" in out[-1][h.panels.status] and len(sent) == 1 and isinstance(sent[0][1], StopFlag)
    run = h.run(**{**run_args(gen_len=256, block_len=32), "model": "gpu"}, request=me)
    next(run), next(run)  # "Starting...", then the first step
    h.ctx.stop(me)  # sets the server's flag, not the copy the race polls
    rest = list(run)
    assert len(rest) == 1 and "Stopped." in rest[0][h.panels.status]
    assert not any(os.path.exists(args[1].path) for args in sent) and len(board) == 0


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
    me = SimpleNamespace(session_hash="me")
    long = dict(gen_len=256, block_len=32)
    assert "finished" in list(h.run(**run_args(), request=me))[-1][h.panels.status]
    stopped = h.run(**run_args(**long), request=me)
    next(stopped), next(stopped)
    h.ctx.stop(me)
    assert flags[1].is_set()  # the stop is a file while the run is in flight
    list(stopped)
    replaced = h.run(**run_args(**long), request=me)
    next(replaced), next(replaced)
    new = h.run(**run_args(**long), request=me)
    next(new)
    assert list(replaced) == []
    new.close()
    assert len(flags) == 4 and not any(os.path.exists(f.path) for f in flags) and len(board) == 0


# ---- trace files (every download's folder) -----------------------------------------------------------------


def test_trace_folder_keeps_only_the_newest_files_within_the_caps(monkeypatch, tmp_path) -> None:
    now = time.time()
    for i in range(6):  # old0 is the oldest
        (tmp_path / f"entropycache-trace-old{i}.json").write_text("x" * 100)
        os.utime(tmp_path / f"entropycache-trace-old{i}.json", (now - 100 + i, now - 100 + i))
    stale = tmp_path / "entropycache-trace-stale.json"
    stale.write_text("{}")
    os.utime(stale, (now - app.serving.downloads.MAX_AGE_S - 10,) * 2)
    (tmp_path / "not-a-trace.json").write_text("{}")

    def traces() -> set[str]:
        return {p.name for p in tmp_path.glob("entropycache-trace-*.json")}

    monkeypatch.setattr(app.serving.downloads, "MAX_FILES", 4)
    first = write_trace({"n": 1}, tmp_path)
    assert traces() == {first.name, *(f"entropycache-trace-old{i}.json" for i in (3, 4, 5))}
    monkeypatch.setattr(app.serving.downloads, "MAX_FILES", 200)
    monkeypatch.setattr(app.serving.downloads, "MAX_BYTES", 250)  # first + old5 + old4 fit; old3 would pass the cap
    second = write_trace({"n": 2}, tmp_path)
    assert traces() == {first.name, second.name, "entropycache-trace-old5.json", "entropycache-trace-old4.json"}
    assert (tmp_path / "not-a-trace.json").exists()


def test_zero_gpu_decorator_is_applied_only_when_spaces_is_installed(monkeypatch) -> None:
    decorated = []

    def gpu(duration: int):
        def wrap(fn):
            decorated.append((fn.__name__, duration))
            return fn

        return wrap

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=gpu))
    try:
        gpu_mod = importlib.reload(app.serving.gpu)
        gpu_mod.on_gpu(test_models_are_loaded_once)
        assert decorated == [("test_models_are_loaded_once", gpu_mod.GPU_DURATION_S)]
    finally:
        monkeypatch.delitem(sys.modules, "spaces")
        gpu_mod = importlib.reload(app.serving.gpu)
    if importlib.util.find_spec("spaces") is None:
        assert gpu_mod.spaces is None and gpu_mod.on_gpu(len) is len


def test_a_model_of_every_task_gets_an_example_of_each(tmp_path) -> None:
    """Examples are the held-out items of every task the model's tokenizer reads: a model trained on
    the whole mixture (the embedded one) gets plain and few-shot problems and stories; one whose
    vocabulary has only the word problems' words gets no story."""
    from tiny_models import save_word_problems_model

    from app.serving.registry import local_choice

    embedded = local_choice(EMBEDDED, "embedded", "cpu")
    shots = [e.count("question :") for e in embedded.examples]
    assert sorted(n for n in shots if n) == [3, 5]  # after 2 and after 4 worked examples
    assert sum(e.startswith("tell a story about") for e in embedded.examples) == 2
    assert embedded.examples[0].startswith("tell a story about")  # the prompt the Drift tab opens on
    assert shots[embedded.paper_example] == 5  # the paper's comparison races the 4-shot problem
    assert [e.long for e in embedded.example_list].count(True) == 1
    assert "alone or after worked examples" in embedded.trained_on and "short stories" in embedded.trained_on
    sums = local_choice(save_word_problems_model(tmp_path), "sums", "cpu")
    assert len(sums.examples) == 6 and not any(e.startswith("tell a story") for e in sums.examples)
    assert "stories" not in sums.trained_on
