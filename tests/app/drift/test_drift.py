"""The Drift tab (app/drift/), on CPU: the streamed diagnostic decode against a direct core decode, its
handler's outputs and refusals, and the drift scatter. The Explain panel's text: tests/app/widgets/test_explain.py.

The model is the embedded one unless ENTROPYCACHE_MODEL names another checkpoint folder of the same format.
"""

from __future__ import annotations

import html
import math
import os
import re
from types import SimpleNamespace

import gradio as gr
import numpy as np
import plotly.graph_objects as go
import pytest
from too_long import too_long_prompt

from app.controls.declared import PEER_CONTROLS, RUN_CONTROLS, probed_policies
from app.controls.run import RawRun, check_run
from app.drift.decode import DriftSnapshot, drift_snapshots
from app.drift.plots import drift_matrix
from app.drift.render import DriftRenderer, DriftRun
from app.drift.status import findings
from app.drift.tab import NO_RUN, DriftTab, build_drift_tab
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL
from app.serving.sessions import RunBoard
from app.widgets.explain import explain_step
from app.widgets.inert import inert
from core.config import DecodeConfig
from core.decoder import decode
from core.events import StepEvent
from core.loading import chat_prompt_ids
from core.policies import make_policy
from evaluation.diagnostics import Probe, drift_analysis, volatility_curve
from evaluation.tasks.word_problems import make_split

MODEL = os.environ.get("ENTROPYCACHE_MODEL")  # None: the shipped embedded model
PROMPT = make_split("test", 1)[0].prompt
TAU, K = 0.5, 2


def controls(**overrides) -> dict:
    values = {key: control.default for key, control in RUN_CONTROLS.items()}
    values.update(tau=TAU, k=K, gen_len=32, block_len=16)
    values.update(overrides)
    return values


def drift_args(prompt: str = PROMPT, model: str = EMBEDDED_LABEL, policy: str = "entropy", **overrides) -> dict:
    """A Drift run's inputs by name, as the panel sends them (every compared policy's controls too)."""
    c = controls(**overrides)
    peers = {key: c.get(key, control.default) for key, control in PEER_CONTROLS.items()}
    return dict(prompt=prompt, model=model, policy=policy, **{key: c[key] for key in RUN_CONTROLS}, **peers)


def drift_run(registry):
    """A Drift run of EntropyCache, checked and built as the Drift tab's handler does."""
    return check_run(registry, RawRun(PROMPT, EMBEDDED_LABEL, "entropy", controls(), {}), probed_policies(),
                     against_ours=False)


def direct_events(model, tokenizer) -> list[StepEvent]:
    ids = chat_prompt_ids(tokenizer, PROMPT)
    policy = make_policy("entropy", tau=TAU, k=K)
    return list(decode(model, ids, policy, DecodeConfig(gen_len=32, block_len=16), before_step=Probe(model)))


def stream_drift(model, tokenizer, run, *, throttle_s: float = 0):
    """One rendered DriftUpdate per snapshot of the diagnostic decode (the Drift tab's stream, without the run)."""
    renderer = DriftRenderer(model, tokenizer, run)
    for snap in drift_snapshots(model, renderer.prompt_ids, run, throttle_s):
        yield renderer.update(snap)


def drift_tab(registry, throttle_s: float = 0) -> DriftTab:
    """The Drift tab as the app builds it."""
    with gr.Blocks():
        return build_drift_tab(AppContext(registry, RunBoard(), throttle_s=throttle_s))


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# ---- the drift tab's stream -------------------------------------------------------------------------


def test_drift_stream_yields_every_part_and_ends_on_the_direct_core_correlations(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    updates = list(stream_drift(model, tokenizer, drift_run(registry), throttle_s=0))
    direct = direct_events(model, tokenizer)
    assert len(updates) == len(direct)  # throttle 0: one update per step
    for i, u in enumerate(updates):
        assert len(u.events) == i + 1
        assert isinstance(u.banner_html, str) and 'class="ec-text"' in u.text_html
        assert all(isinstance(f, go.Figure) for f in (u.scatter_fig, u.staleness_fig, u.heatmap_fig, u.volatility_fig))
        assert (u.final_text is not None) == (i == len(updates) - 1)
    last = updates[-1]
    want = drift_analysis(direct, model.config.eos_token_ids)
    assert last.analysis["pairs"] == want["pairs"] and last.analysis["summary"] == want["summary"]
    for key, link in want["links"].items():
        assert all(same(last.analysis["links"][key][m], link[m]) for m in ("pearson", "spearman"))
    assert last.curve == volatility_curve(direct)
    assert [e.tokens for e in last.events] == [e.tokens for e in direct]
    # The figures show those numbers: the title's rho per series, the scatter's points (reused rows first,
    # unmarked then marked), the staleness curve, the heatmap, the log curve.
    title = last.scatter_fig.layout.title.text
    assert f"Spearman {want['links']['reused_unmarked']['spearman']:+.2f}" in title
    reused = [p for p in want["pairs"] if p.reused is not None and not p.marked]
    assert list(last.scatter_fig.data[0].x) == [p.entropy for p in reused]
    assert list(last.scatter_fig.data[0].y) == [p.reused for p in reused]
    assert list(last.staleness_fig.data[1].x) == list(want["staleness"])
    z = drift_matrix(list(last.events), model.config.n_layers, 32)
    assert np.isnan(z[:, 0]).all()  # step 0 has nothing cached to drift
    np.testing.assert_allclose(z[:, 1], direct[1].drift_cos, rtol=1e-6)
    assert last.volatility_fig.layout.yaxis.type == "log"
    assert list(last.volatility_fig.data[0].x) == sorted(volatility_curve(direct))
    assert "Done: " in last.banner_html and html.escape(" ".join(findings(want))) in last.banner_html


def test_drift_snapshots_are_throttled_and_a_stop_ends_them(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, PROMPT)
    run = drift_run(registry)
    ticks = iter(range(10_000))
    snaps = list(drift_snapshots(model, ids, run, throttle_s=1e9, wall_clock=lambda: next(ticks)))
    assert [len(s.events) for s in snaps] == [1, 32] and snaps[-1].finished and isinstance(snaps[0], DriftSnapshot)
    polls = iter([False, False, True])
    stopped = list(drift_snapshots(model, ids, run, throttle_s=0, should_stop=lambda: next(polls)))
    assert [len(s.events) for s in stopped] == [1, 2] and not stopped[-1].finished


def test_drift_handler_streams_all_outputs_and_the_explain_panel_follows_the_slider(registry) -> None:
    d = drift_tab(registry)
    me = SimpleNamespace(session_hash="me")
    out = list(d.run(**drift_args(), request=me))
    assert all(set(o) <= set(d.panels.outputs()) for o in out) and len(d.ctx.board) == 0
    assert all(set(o) == set(d.panels.outputs()) for o in (out[0], out[-1]))  # the start and the end: all of them
    p = d.panels
    banner, scatter, staleness, heatmap, volatility, final, run, slider, explanation = (
        out[-1][c] for c in (p.status, p.scatter, p.staleness, p.heatmap, p.volatility, p.final, p.record, p.step,
                             p.explanation))
    assert "Done" in banner and final and isinstance(run, DriftRun) and len(run.events) == 32
    assert all(isinstance(f, go.Figure) for f in (scatter, staleness, heatmap, volatility))
    assert slider.maximum == 31 and slider.value == 31 and "This was the last step" in explanation
    _, tokenizer = registry.get(EMBEDDED_LABEL)
    assert d.explain(3, run) == explain_step(run.events[3], run.events[4], tokenizer)
    reason = run.events[4].reason
    assert f"Step 4's reason: *{reason}*" in html.unescape(d.explain(3, run))  # the next step's, in its own words
    assert "**Step 3**" in d.explain(3.0, run)
    assert d.explain(0, None) == NO_RUN
    for bad, message in ((32, "between 0 and 31, got 32"), (-1, "between 0 and 31"), (1.5, "whole number, got 1.5"),
                         (10**400, "between 0 and 31, got 1000"), (float("nan"), "got NaN"), ("3", "got '3'")):
        with pytest.raises(ValueError, match=message):
            d.explain(bad, run)
        refused = d.on_step(bad, run)  # the slider's handler: told in the status line, the explanation kept
        assert list(refused) == [d.panels.status] and message in refused[d.panels.status]
    assert d.on_step(3, run) == {d.panels.explanation: d.explain(3, run)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (drift_args(prompt="   "), "empty"),
        (drift_args(model="/etc/passwd"), "Unknown model"),
        (drift_args(tau=-1), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got -1"),
        (drift_args(k=1.5), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got 1.5"),
        (drift_args(gen_len=30), "do not fit together"),
        (drift_args(steps=4, threshold=0.9), "steps to 0"),
        (drift_args(policy="none"), "Unknown policy 'none'; choose one of: entropy, d2cache"),
        (drift_args(policy="d2cache", d2cache_rollout_p=7),
         "rollout_p \\(D2Cache\\) must be a number in \\[0, 1\\], got 7"),
    ],
)
def test_drift_handler_refuses_bad_inputs_clearly(registry, args: dict, message: str) -> None:
    d = drift_tab(registry)
    out = list(d.run(**args, request=SimpleNamespace(session_hash="me")))
    assert len(out) == 1 and list(out[0]) == [d.panels.status]  # the status line alone: the panels stay as they were
    shown = out[0][d.panels.status]
    assert 'class="ec-banner ec-refused"' in shown and re.search(message, html.unescape(shown))


def test_the_drift_tab_probes_a_peer_and_explains_its_steps_in_its_own_words(registry) -> None:
    d = drift_tab(registry)
    out = list(d.run(**drift_args(policy="dllm-cache", dllm_cache_rho=0.5), request=SimpleNamespace(session_hash="me")))
    banner, scatter, run = (out[-1][c] for c in (d.panels.status, d.panels.scatter, d.panels.record))
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    direct = list(decode(model, chat_prompt_ids(tokenizer, PROMPT), make_policy("dllm-cache", rho=0.5),
                         DecodeConfig(gen_len=32, block_len=16), before_step=Probe(model)))
    assert [e.tokens for e in run.events] == [e.tokens for e in direct]
    assert [e.reason for e in run.events] == [e.reason for e in direct]
    assert [e.layer_rows for e in run.events] == [e.layer_rows for e in direct]
    assert make_policy("dllm-cache", rho=0.5).describe() in html.unescape(banner)
    assert not scatter.layout.shapes  # no tau line: the threshold is EntropyCache's
    step = next(i for i, e in enumerate(run.events) if len(set(e.layer_rows)) > 1)  # each layer its own rows
    assert "Its layers computed different rows" in d.explain(step, run)
    assert inert(run.events[step].reason) in d.explain(step, run)


def test_a_prompt_that_does_not_fit_the_model_is_refused_clearly_and_the_run_ends(registry) -> None:
    model, _ = registry.get(EMBEDDED_LABEL)
    prompt, longest = too_long_prompt(model)
    d = drift_tab(registry)
    too_long = drift_args(prompt, gen_len=longest, block_len=32)
    out = list(d.run(**too_long, request=SimpleNamespace(session_hash="me")))
    assert "exceeds the model's" in out[-1][d.panels.status]  # core's own check, at the first step
    assert list(out[-1]) == [d.panels.status] and "ec-refused" in out[-1][d.panels.status]
    assert len(d.ctx.board) == 0


def test_a_stop_ends_the_diagnostic_decode_with_a_banner(registry) -> None:
    d = drift_tab(registry)
    me = SimpleNamespace(session_hash="me")
    run = d.run(**drift_args(gen_len=64, block_len=32), request=me)
    for _ in range(3):  # starting..., then the first steps
        next(run)
    assert "Stopped." in d.ctx.stop(me)
    rest = list(run)
    assert "Stopped." in rest[-1][d.panels.status] and len(d.ctx.board) == 0


def test_the_drift_scatter_covers_every_step_of_the_default_story(registry) -> None:
    """On the story the Drift tab opens on (sampled as its model declares), the steps above tau are in the
    scatter too: the next step is full, so every row is recomputed (marked with an x); its x axis reaches
    the largest entropy of the decode's pairs and tau's line lies inside it."""
    from app.drift.plots import change_scatter

    model, tokenizer = registry.get(EMBEDDED_LABEL)
    choice = registry.choice(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, choice.examples[0])  # the Drift tab's first example: a story
    config = DecodeConfig(gen_len=64, block_len=32, temperature=0.7)
    events = list(decode(model, ids, make_policy("entropy", tau=1.0, k=2), config, before_step=Probe(model)))
    analysis = drift_analysis(events, model.config.eos_token_ids)
    pairs = analysis["pairs"]
    above = [p for p in pairs if p.entropy > 1.0 and not p.marked]
    assert above and all(p.full and p.reused is None and p.recomputed == p.change for p in above)
    fig = change_scatter(analysis, 1.0)
    full_marks = [t for t in fig.data if t.marker.symbol == "x"]
    assert sorted(x for t in full_marks for x in t.x) == sorted(p.entropy for p in pairs if p.full and not p.marked)
    low, high = fig.layout.xaxis.range
    assert low < 0 and high >= max(p.entropy for p in pairs) and high > 1.0
    assert "tau 1: above it, the next step is full" in [a.text for a in fig.layout.annotations]  # the line named
    assert (fig.layout.yaxis.type, fig.layout.yaxis.dtick, fig.layout.yaxis.tickformat) == ("log", 1, "~%")
    # the rows recomputed correlate over the steps into a partial step; the steps into a full one are said apart
    assert analysis["links"]["recomputed_unmarked"]["n"] == sum(not p.marked and not p.full for p in pairs)
    assert analysis["full_next"]["n"] == len(above) > 0
    assert f"After the {len(above)} steps followed by a full step, every row moved" in analysis["summary"]
