"""The Drift tab's renderer: a diagnostic decode's snapshots (app/drift/decode.py) as the banner (the
sentences of app/drift/status.py: what holds on this prompt), the response text and four figures, using
evaluation.diagnostics for every number.

Data flows one way: the decoder yields events, this module only reads them. No gradio here.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace

import plotly.graph_objects as go

from app.controls.run import Run
from app.drift.decode import DriftSnapshot
from app.drift.plots import change_scatter, drift_heatmap, staleness_figure, volatility_figure
from app.drift.status import findings, left_out, progress
from app.widgets.banner import banner, changes_html
from app.widgets.explain import explain_step
from app.widgets.lane_plots import step_axis
from app.widgets.text_view import TokenText, confidence_by_position, render_text
from core.events import StepEvent
from core.loading import answer_text
from evaluation.diagnostics import drift_analysis, volatility_curve


@dataclass(frozen=True)
class DriftRun:
    """What the Explain panel needs of a finished decode (kept in the session's gr.State)."""
    model: str  # the model's label: its tokenizer decodes the tokens
    events: tuple  # the StepEvents core yielded, as they came

    def explain(self, i: int, tokenizer) -> str:
        """Step i, told from its own event and the next one's."""
        after = self.events[i + 1] if i + 1 < len(self.events) else None
        return explain_step(self.events[i], after, tokenizer)


@dataclass(frozen=True)
class DriftUpdate:
    banner_html: str
    text_html: str
    scatter_fig: go.Figure
    staleness_fig: go.Figure
    heatmap_fig: go.Figure
    volatility_fig: go.Figure
    analysis: dict  # evaluation.diagnostics.drift_analysis of the events so far
    curve: dict[int, float]  # evaluation.diagnostics.volatility_curve of the events so far
    events: tuple[StepEvent, ...]
    # Only on the last update of a decode that ran to the end: its text, the decode for the Explain
    # panel, and the explanation of its last step.
    final_text: str | None = None
    record: DriftRun | None = None
    explanation: str = ""


class DriftRenderer:
    """Snapshots of one diagnostic decode -> DriftUpdates."""

    def __init__(self, model, tokenizer, run: Run) -> None:
        cfg = model.config
        self.run = run
        self.tokenizer = tokenizer
        self.prompt_ids = run.ids(tokenizer)  # the ids the decode gets
        self.max_steps = run.max_steps
        self.n_layers = cfg.n_layers
        self.text = TokenText(tokenizer, cfg.mask_token_id, cfg.eos_token_ids)
        self.policy = run.policies[0].describe()
        self.tau = run.tau  # a threshold only ours has

    def empty(self, message: str) -> DriftUpdate:
        return self._render((), message, finished=False)

    def update(self, snap: DriftSnapshot) -> DriftUpdate:
        update = self._render(snap.events, "", snap.finished)
        if update.final_text is None:
            return update
        record = DriftRun(self.run.model, snap.events)
        return replace(update, record=record, explanation=record.explain(len(snap.events) - 1, self.tokenizer))

    def _render(self, events: tuple[StepEvent, ...], message: str, finished: bool) -> DriftUpdate:
        analysis = drift_analysis(list(events), self.text.eos_ids)
        curve = volatility_curve(list(events))
        return DriftUpdate(
            banner_html=self._banner(events, analysis, message, finished),
            text_html=render_text(events[-1] if events else None, self.text, self.run.config.gen_len,
                                  confidence_by_position(events)),
            scatter_fig=change_scatter(analysis, self.tau),
            staleness_fig=staleness_figure(analysis),
            heatmap_fig=drift_heatmap(list(events), self.n_layers, step_axis(len(events), self.max_steps)),
            volatility_fig=volatility_figure(curve),
            analysis=analysis,
            curve=curve,
            events=events,
            final_text=answer_text(self.tokenizer, events[-1]) if finished and events else None,
        )

    def _banner(self, events, analysis: dict, message: str, finished: bool) -> str:
        """The status line (app/drift/status.py), with what the decode does otherwise than it was sent."""
        changed = changes_html(self.run.changed)
        if message:
            return banner(f"{html.escape(message)}{changed}")
        said = " ".join([progress(events, self.policy, self.max_steps, finished), *findings(analysis)])
        return banner(f"{html.escape(said)}{changed} <span class='ec-note'>{html.escape(left_out(analysis['marked']))}"
                      "</span>")
