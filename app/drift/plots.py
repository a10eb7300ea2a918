"""Plotly figures of a diagnostic decode: K/V change vs entropy, cache staleness by steps since a full step and
per layer, K/V volatility by age.

They read what evaluation.diagnostics computes from the events; nothing here measures anything. No gradio here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go

from app.widgets.empty_plot import empty_figure
from app.widgets.plot_style import FULL_COLOR, LINE_COLOR, MARGIN, TAU_COLOR
from core.events import StepEvent


def _r(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:+.2f}"


class Figure(NamedTuple):
    """One of the tab's figures: its title, what it shows (said in it until a decode draws it), its height (px)."""

    title: str
    shows: str
    height: int


FIGURES = {
    "scatter": Figure("K/V change vs previous-step entropy",
                      "how far each step's decode moved the K/V, against the entropy of what it decoded", 340),
    "staleness": Figure("Cache staleness by steps since the last full step",
                        "how far the cache drifts from the fresh K/V as partial steps pile up", 340),
    "heatmap": Figure("Cache staleness (1 - cos) per layer at the start of each step",
                      "the same staleness, layer by layer and step by step, full steps marked", 300),
    "volatility": Figure("K/V volatility by steps since a token was unmasked",
                         "how much a decoded token's K/V still moves, step after step", 300),
}


def placeholder(name: str) -> go.Figure:
    """Figure `name` (a key of FIGURES) before a diagnostic decode: what it will show."""
    figure = FIGURES[name]
    return empty_figure(figure.title, f"{figure.shows}:<br>drawn step by step once you press Run diagnostics",
                        figure.height)


# A log axis of relative changes, ticked at each power of ten as a percentage (0.1%, 1%, 10%): not plotly's
# bare "2" and "5" between the powers.
PERCENT_LOG_AXIS = dict(type="log", dtick=1, tickformat="~%")

SERIES_STYLE = {  # evaluation.diagnostics.SERIES: what each shows, and its colour
    "reused": ("rows the next step reuses", FULL_COLOR),
    "recomputed": ("rows it recomputes", LINE_COLOR),
    "change": ("every row (every step is full)", LINE_COLOR),
}


def change_scatter(analysis: dict, tau: float | None) -> go.Figure:
    """The previous step's max entropy (x) against how far that step moved the K/V (y, mean relative
    change), for every step: the rows the next step reuses, what the cache risks, and those it
    recomputes (every row, marked with an x, where the next step is full: after a step above tau, the
    high-entropy steps the method is about); with every step full, every row. Pairs after an
    end-of-text or into a block's first step are hollow and out of the correlations the title gives
    first. The x axis spans every entropy of the decode and EntropyCache's `tau` (a dashed line; None:
    none)."""
    pairs, links = analysis["pairs"], analysis["links"]
    shown = ("reused", "recomputed") if any(p.reused is not None for p in pairs) else ("change",)
    fig = go.Figure()
    for name in shown:
        label, color = SERIES_STYLE[name]
        for marked in (False, True):
            for full in (False, True) if name == "recomputed" else (None,):
                points = [p for p in pairs if p.marked == marked and getattr(p, name) is not None
                          and full in (None, p.full)]
                fig.add_trace(go.Scatter(
                    x=[p.entropy for p in points], y=[getattr(p, name) for p in points], mode="markers",
                    name=(label + (": every row, the next step full" if full else "")
                          + (" (marked apart)" if marked else "")),
                    legendgroup=f"{name}{full}", showlegend=not marked,
                    marker=dict(size=7 if full else 6, color=color, opacity=0.75,
                                symbol=("x-open" if marked else "x") if full else
                                ("circle-open" if marked else "circle")),
                    customdata=[p.step for p in points],
                    hovertemplate="step %{customdata}<br>entropy %{x:.3f}<br>change %{y:.2e}<extra></extra>"))
    top = max([p.entropy for p in pairs] + ([tau] if tau is not None and tau >= 0 else []), default=1.0)
    parts = [f"{SERIES_STYLE[name][0].split(' (')[0]}: Spearman {_r(links[f'{name}_unmarked']['spearman'])} "
             f"({_r(links[f'{name}_all']['spearman'])} with marked)" for name in shown]
    fig.update_layout(
        title=dict(text=f"{FIGURES['scatter'].title}<br><sup>" + "; ".join(parts) + "</sup>", font=dict(size=13)),
        height=FIGURES["scatter"].height, margin=dict(MARGIN, t=60), template="plotly_white",
        legend=dict(orientation="h", y=-0.3, font=dict(size=11)),
        xaxis=dict(title="max entropy decoded at the previous step (nats)", range=[-0.02 * top, top * 1.05]),
        yaxis=dict(title="mean relative K/V change", **PERCENT_LOG_AXIS))
    fig.add_annotation(text="hollow: after an end-of-text, or into a block's first step", showarrow=False,
                       xref="paper", yref="paper", x=1, y=1.02, xanchor="right", font=dict(size=10))
    if tau is not None and tau >= 0:  # after the layout, whose annotations would replace the line's label
        fig.add_vline(x=tau, line=dict(color=TAU_COLOR, dash="dash", width=1.5),
                      annotation=dict(text=f"tau {tau:g}: above it, the next step is full", font=dict(size=11,
                                      color=TAU_COLOR)), annotation_position="bottom right")
    return fig


def staleness_figure(analysis: dict) -> go.Figure:
    """The policy's cache against the fresh K/V (relative L2) at the start of each step, by steps since
    its last full rewrite: what the partial steps pile up (unmarked pairs; the mean as a line)."""
    points = [p for p in analysis["pairs"] if not p.marked and p.since_full is not None]
    curve = analysis["staleness"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[p.since_full for p in points], y=[p.staleness for p in points], mode="markers",
                             name="steps", marker=dict(size=5, color=LINE_COLOR, opacity=0.45),
                             customdata=[p.step for p in points],
                             hovertemplate="step %{customdata}<br>%{x} since full<br>staleness %{y:.2e}"
                                           "<extra></extra>"))
    fig.add_trace(go.Scatter(x=list(curve), y=list(curve.values()), mode="lines", name="mean",
                             line=dict(color=FULL_COLOR, width=2)))
    fig.update_layout(title=dict(text=FIGURES["staleness"].title, font=dict(size=13)),
                      height=FIGURES["staleness"].height, margin=MARGIN, showlegend=False, template="plotly_white",
                      xaxis=dict(title="steps since the cache was last rewritten in full", rangemode="tozero"),
                      yaxis=dict(title="cache vs fresh K/V (relative L2)"))
    return fig


def drift_matrix(events: list[StepEvent], n_layers: int, max_steps: int) -> np.ndarray:
    """[layer, step] drift (1 - cosine) at the start of each step; NaN where not measured (yet)."""
    z = np.full((n_layers, max_steps), np.nan, dtype=np.float32)
    for e in events:
        if e.drift_cos is not None and e.step < max_steps:
            z[:, e.step] = np.asarray(e.drift_cos[:n_layers], dtype=np.float32)
    return z


def drift_heatmap(events: list[StepEvent], n_layers: int, max_steps: int) -> go.Figure:
    z = drift_matrix(events, n_layers, max_steps)
    full = [e.step for e in events if e.full and e.step < max_steps]
    fig = go.Figure(go.Heatmap(z=z, colorscale="Viridis", colorbar=dict(title="1 - cos", thickness=12),
                               hovertemplate="step %{x}<br>layer %{y}<br>drift %{z:.2e}<extra></extra>"))
    if full:  # the steps that recomputed everything, marked above the map and named in the legend
        fig.add_trace(go.Scatter(x=full, y=[n_layers - 0.5] * len(full), mode="markers",
                                 name="full step (the cache rewritten)",
                                 marker=dict(symbol="triangle-down", color=FULL_COLOR, size=7), cliponaxis=False,
                                 hovertemplate="step %{x}: full<extra></extra>"))
    fig.update_layout(title=dict(text=FIGURES["heatmap"].title, font=dict(size=13)),
                      height=FIGURES["heatmap"].height, margin=dict(MARGIN, b=70), template="plotly_white",
                      showlegend=bool(full), legend=dict(orientation="h", y=-0.3, x=0, font=dict(size=11)),
                      xaxis=dict(title="step", range=[-0.5, max_steps - 0.5]),
                      yaxis=dict(title="layer", range=[-0.5, n_layers - 0.5]))
    return fig


def volatility_figure(curve: dict[int, float]) -> go.Figure:
    """Mean relative K/V change from one step to the next, by steps since the token was unmasked (log y)."""
    ages = sorted(curve)
    values = [curve[a] for a in ages]
    fig = go.Figure(go.Scatter(x=ages, y=values, mode="lines+markers", marker=dict(size=5),
                               line=dict(color=LINE_COLOR, width=1.5),
                               hovertemplate="age %{x}<br>change %{y:.2e}<extra></extra>"))
    fig.update_layout(title=dict(text=FIGURES["volatility"].title, font=dict(size=13)),
                      height=FIGURES["volatility"].height, margin=MARGIN, showlegend=False, template="plotly_white",
                      xaxis=dict(title="steps since unmasked"),
                      yaxis=dict(title="mean relative K/V change", **PERCENT_LOG_AXIS))
    return fig
