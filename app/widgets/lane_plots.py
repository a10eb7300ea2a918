"""Plotly figures of one lane's events: the entropy trace and the recomputed-rows heatmaps.

Axes are sized for the whole decode from the first step, so the figures fill in instead of rescaling.
Heatmaps are numpy arrays: plotly sends them as compact typed arrays, not lists of numbers.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.widgets.empty_plot import empty_figure
from app.widgets.plot_style import FULL_COLOR, LINE_COLOR, MARGIN, TAU_COLOR
from core.events import StepEvent

# position x step cells: -1 step not taken yet, 0 row reused from the cache, 1 recomputed, 2 unmasked
ROW_SCALE = [[0, "#ffffff"], [0.25, "#ffffff"], [0.25, "#e4e7ec"], [0.5, "#e4e7ec"], [0.5, "#2f6fed"],
             [0.75, "#2f6fed"], [0.75, "#ffb000"], [1, "#ffb000"]]
CURSOR_COLOR = "#2ca02c"
ENTROPY_HEIGHT = 160  # px: a lane's panel, text and both figures fit one 1366x768 screen
ROWS_HEIGHT = 250


def step_axis(steps_taken: int, most: int) -> int:
    """How many steps a lane's plots span: the next power of two (at least 8) from the steps taken,
    at most the steps its decode may take. A 64-step answer fills its plot, and a live plot rescales
    a few times at most, not at every step."""
    span = 8
    while span < steps_taken:
        span *= 2
    return min(span, max(most, steps_taken))


def entropy_figure(events: list[StepEvent], tau: float | None, span: int, cursor: int | None = None,
                   cached: bool = True) -> go.Figure:
    """Max entropy of the tokens unmasked at each step over `span` steps; EntropyCache's tau line (None:
    a policy without one); for a lane with a cache (`cached`), its full steps, each with its policy's
    reason on hover (EntropyCache's comes the step after one above tau); a replay's `cursor` step marked
    by a vertical line. Its legend heads it (the lane's panel above names the policy)."""
    steps = [e.step for e in events]
    ent = [e.max_entropy for e in events]
    top = max([*([tau * 1.2] if tau is not None else []), *ent, 0.5])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=ent, mode="lines+markers", name="max entropy", marker=dict(size=4),
                             line=dict(color=LINE_COLOR, width=1.5)))
    if cached:
        full = [e for e in events if e.full]
        reasons = [html.escape(e.reason) for e in full]  # plotly draws <a href> in hover text as a link
        fig.add_trace(go.Scatter(x=[e.step for e in full], y=[e.max_entropy for e in full], mode="markers",
                                 name="full step", customdata=reasons,
                                 marker=dict(color=FULL_COLOR, symbol="x", size=7),
                                 hovertemplate="step %{x}: full (every row recomputed), %{customdata}<extra></extra>"))
    if tau is not None:
        fig.add_trace(go.Scatter(x=[-0.5, span - 0.5], y=[tau, tau], mode="lines", name=f"tau = {tau:g}",
                                 line=dict(color=TAU_COLOR, dash="dash", width=1.5), hoverinfo="skip"))
    fig.update_layout(height=ENTROPY_HEIGHT, margin=dict(MARGIN, t=28), showlegend=True,  # a lone trace's legend too
                      legend=dict(orientation="h", y=1.02, x=0, xanchor="left", yanchor="bottom", font=dict(size=11)),
                      xaxis=dict(title="step", range=[-0.5, span - 0.5]),
                      yaxis=dict(title="nats", range=[0, top * 1.05]), template="plotly_white")
    if cursor is not None:
        fig.add_vline(x=cursor, line=dict(color=CURSOR_COLOR, width=2), annotation_text=f"step {cursor}",
                      annotation_position="top left")
    return fig


def entropy_placeholder() -> go.Figure:
    """The entropy trace before a race: what it will show."""
    return empty_figure("Entropy trace", "each step's max decoded-token entropy (nats), against tau:<br>"
                        "drawn step by step once the race starts", ENTROPY_HEIGHT)


def layer_matrix(events: list[StepEvent], n_layers: int, max_steps: int, length: int) -> np.ndarray:
    """[layer, step] fraction of the sequence's rows computed; NaN for steps not taken yet."""
    z = np.full((n_layers, max_steps), np.nan, dtype=np.float32)
    for e in events:
        if e.step < max_steps:
            z[:, e.step] = np.asarray(e.layer_rows[:n_layers], dtype=np.float32) / length
    return z


def row_matrix(events: list[StepEvent], max_steps: int, length: int) -> np.ndarray:
    """[position, step]: 0 reused, 1 recomputed, 2 unmasked in that step; -1 for steps not taken yet."""
    z = np.full((length, max_steps), -1, dtype=np.int8)  # int8: a quarter of the bytes sent per update
    for e in events:
        if e.step < max_steps:
            z[:, e.step] = 0
            z[e.rows, e.step] = 1
            z[e.unmasked, e.step] = 2
    return z


MAX_ROW_BANDS = 1024  # a row map's rows at most: a band of positions each, beyond (a page shows ~300 anyway)


def banded(z: np.ndarray, bands: int = MAX_ROW_BANDS) -> tuple[np.ndarray, np.ndarray]:
    """A row map of more than `bands` positions as `bands` bands of equal width, each showing the most
    telling kind of its positions (unmasked over recomputed over reused over not yet), and each band's
    first position; a smaller map as it is. An update then carries at most `bands` x steps cells,
    whatever the prompt's length."""
    length = z.shape[0]
    width = -(-length // bands)  # ceil
    if width == 1:
        return z, np.arange(length)
    padded = np.full((width * -(-length // width), z.shape[1]), -1, dtype=z.dtype)
    padded[:length] = z
    return padded.reshape(-1, width, z.shape[1]).max(axis=1), np.arange(0, length, width)


# The row map's four kinds of cell, at the middle of each colour's band of ROW_SCALE (z from -1 to 2).
ROW_KINDS = {"not yet": -0.625, "reused": 0.125, "recomputed": 0.875, "unmasked": 1.625}


def rows_figure(events: list[StepEvent], n_layers: int, span: int, length: int, prompt_len: int,
                cursor: int | None = None) -> go.Figure:
    """Two heatmaps over `span` steps, each with its scale: per layer, the share of rows recomputed;
    per position (in bands of positions beyond MAX_ROW_BANDS), which rows (reused, recomputed,
    unmasked); a replay's `cursor` step marked on both."""
    fig = make_subplots(rows=2, cols=1, row_heights=[0.32, 0.68], vertical_spacing=0.14, shared_xaxes=True,
                        subplot_titles=("rows recomputed per layer (share of sequence)",
                                        "which rows: reused / recomputed / unmasked"))
    fig.add_trace(go.Heatmap(z=layer_matrix(events, n_layers, span, length), zmin=0, zmax=1,
                             colorscale="Blues", colorbar=dict(thickness=10, len=0.32, y=0.86, tickformat=".0%",
                                                               tickvals=[0, 1]),
                             hovertemplate="step %{x}<br>layer %{y}<br>%{z:.0%} of rows<extra></extra>"), 1, 1)
    z, first = banded(row_matrix(events, span, length))
    fig.add_trace(go.Heatmap(z=z, y=first, zmin=-1, zmax=2, colorscale=ROW_SCALE,
                             colorbar=dict(thickness=10, len=0.62, y=0.31, tickvals=list(ROW_KINDS.values()),
                                           ticktext=list(ROW_KINDS)),
                             hovertemplate="step %{x}<br>position %{y}<extra></extra>"), 2, 1)
    # The prompt/response boundary, so the prompt's rows (reused by every caching policy) stand out.
    fig.add_hline(y=prompt_len - 0.5, line=dict(color="#444", width=1, dash="dot"), row=2, col=1)
    fig.update_xaxes(range=[-0.5, span - 0.5])
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_yaxes(title_text="position", range=[length - 0.5, -0.5], row=2, col=1)
    fig.update_layout(height=ROWS_HEIGHT, margin=MARGIN, template="plotly_white")
    fig.update_annotations(font_size=12)
    if cursor is not None:
        for row in (1, 2):
            fig.add_vline(x=cursor, line=dict(color=CURSOR_COLOR, width=2), row=row, col=1)
    return fig


def rows_placeholder() -> go.Figure:
    """The recomputed-rows maps before a race: what they will show."""
    return empty_figure("Recomputed rows", "which rows each step computes, per layer and per position<br>"
                        "(reused from the cache, recomputed, unmasked): drawn once the race starts", ROWS_HEIGHT)
