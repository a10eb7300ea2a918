"""The race's rendered stream (app/race/render.py) against a direct core decode, on the embedded model
(or ENTROPYCACHE_MODEL): every step's four parts, the throttle, the graphs setting, the trace, the plots' axes."""

from __future__ import annotations

import dataclasses
import json

import plotly.graph_objects as go
import pytest
from races import PROMPT, race_run, stream_race
from too_long import too_long_prompt

from app.race.render import RaceRenderer
from app.race.speed import SUMMARY_HEADERS
from app.serving.registry import EMBEDDED_LABEL, ModelRegistry
from app.widgets.lane_plots import step_axis
from core.config import DecodeConfig
from core.decoder import generate
from core.events import StepEvent
from core.loading import answer_text, chat_prompt_ids
from core.policies import make_policy


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
            assert "ec-speed" in lane.speed and "steps" in lane.speed
            assert 'class="ec-text"' in lane.text
            # the uncached exact decoder has no threshold and no full steps to mark
            assert isinstance(lane.entropy, go.Figure) and [t.name for t in lane.entropy.data] == traces
            assert [t.type for t in lane.rows.data] == ["heatmap", "heatmap"]
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


def test_prompt_that_does_not_fit_the_model_is_refused_clearly(registry, tmp_path) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    prompt, longest = too_long_prompt(model)
    # 32 steps for both lanes (a compared cache runs at the controls' settings, vanilla one token per
    # step): within the work budget (app/serving/budget.py), so that core's own check is the one met
    too_long = race_run(registry, prompt, policy="dual", gen_len=longest, block_len=32, steps=32)
    with pytest.raises(ValueError, match="exceeds the model's"):  # core's own check, at the first step
        next(stream_race(model, tokenizer, too_long, trace_dir=tmp_path))


def test_with_a_threshold_the_plots_grow_with_the_steps_up_to_gen_len(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    run = race_run(registry, threshold=0.9)
    gen_len = run.config.gen_len
    renderer = RaceRenderer(model, tokenizer, run)
    assert renderer.layout.max_steps == gen_len
    assert renderer.empty("").lanes[0].entropy.layout.xaxis.range == (-0.5, 7.5)
    assert [step_axis(n, gen_len) for n in (0, 8, 9, 17, gen_len)] == [8, 8, 16, 32, gen_len]
    assert step_axis(gen_len + 5, gen_len) == gen_len + 5  # never cuts a step off
    # steps cannot be set as well, whatever sends it: nothing could cut the plots short
    with pytest.raises(ValueError, match="steps and threshold cannot both be set"):
        dataclasses.replace(run.config, steps=2)


def test_a_lane_part_is_named_once_by_what_the_renderer_draws() -> None:
    """LaneView declares a lane's parts; the panels that show them and the HTTP API's names follow it."""
    from app.race.panels import OUTPUT_NAMES, LanePanels
    from app.race.render import LANE_PARTS, LaneView

    assert LANE_PARTS == ("speed", "text", "entropy", "rows")
    assert set(LANE_PARTS) <= {f.name for f in dataclasses.fields(LanePanels)}
    assert set(LANE_PARTS) < {f.name for f in dataclasses.fields(LaneView)}
    assert [name for name in OUTPUT_NAMES if name.startswith("middle.")] == [*(f"middle.{p}" for p in LANE_PARTS),
                                                                               "middle.final"]
