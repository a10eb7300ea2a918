"""Plotly figures of a diagnostic decode: drift vs entropy, drift per layer and step, K/V volatility by age.

They read what core.diagnostics computes from the events; nothing here measures anything. No gradio here.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from app.widgets.plot_style import FULL_COLOR, LINE_COLOR, MARGIN, TAU_COLOR
from core.events import StepEvent


def _r(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:+.2f}"


def drift_scatter(stats: dict, tau: float | None) -> go.Figure:
    """Previous step's max entropy (x) against mean drift over layers (1 - cosine, y); r and rho in the
    title; EntropyCache's threshold `tau` as a dashed line (None: no line, for a policy without one)."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=stats["entropy"], y=stats["drift_cos"], mode="markers", name="steps",
                             marker=dict(size=6, color=LINE_COLOR, opacity=0.7),
                             hovertemplate="entropy %{x:.3f}<br>drift %{y:.2e}<extra></extra>"))
    if tau is not None:
        fig.add_vline(x=tau, line=dict(color=TAU_COLOR, dash="dash", width=1.5))
    title = (f"Drift vs previous-step entropy: Pearson {_r(stats['pearson_cos'])}, "
             f"Spearman {_r(stats['spearman_cos'])} ({len(stats['entropy'])} steps)")
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=320, margin=MARGIN, showlegend=False,
                      xaxis=dict(title="max entropy decoded at the previous step (nats)"),
                      yaxis=dict(title="mean drift (1 - cosine)"), template="plotly_white")
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
    if full:  # the steps that recomputed everything, marked above the map
        fig.add_trace(go.Scatter(x=full, y=[n_layers - 0.5] * len(full), mode="markers", name="full step",
                                 marker=dict(symbol="triangle-down", color=FULL_COLOR, size=7), cliponaxis=False,
                                 hovertemplate="step %{x}: full<extra></extra>"))
    fig.update_layout(title=dict(text="Cache drift per layer at the start of each step", font=dict(size=13)),
                      height=300, margin=MARGIN, showlegend=False, template="plotly_white",
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
    fig.update_layout(title=dict(text="K/V volatility by steps since a token was unmasked", font=dict(size=13)),
                      height=300, margin=MARGIN, showlegend=False, template="plotly_white",
                      xaxis=dict(title="steps since unmasked"),
                      yaxis=dict(title="mean relative K/V change", type="log"))
    return fig
