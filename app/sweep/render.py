"""What the Sweep tab shows of a sweep's bench rows: the Pareto plot, the table, the progress bar.

Each point is one (tau, k) of EntropyCache: measured speedup over the exact decoder (x) against a
measure of what it decoded (y): accuracy, agreement with the exact decoder, or how far its texts match
the exact decoder's before they part (the median first divergence). The plot says what both axes
mean. The points no other point beats on both axes form the Pareto front, drawn as a line: the
settings worth choosing between. Every point carries its (tau, k) as customdata, which the page sends
back when the point is clicked (app/sweep/panels.py SWEEP_JS). No gradio here.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import plotly.graph_objects as go

from app.controls.declared import shown_policy
from app.widgets.banner import banner
from app.widgets.empty_plot import empty_figure
from app.widgets.plot_style import MARGIN
from evaluation.bench import Progress


@dataclass(frozen=True)
class Metric:
    """A y axis: the bench row's field, its axis title, and what it means, in a sentence under the plot."""

    field: str
    title: str
    meaning: str
    share: bool = True  # a fraction in [0, 1] (else a count of tokens)


METRICS = {
    "accuracy": Metric("accuracy", "accuracy", "accuracy: the share of prompts answered right (a word problem's "
                       "final number; a story passes the story checker)"),
    "agreement": Metric("agreement", "agreement with the exact decoder", "agreement: the share of response tokens "
                        "equal to the exact decoder's, position by position"),
    "first divergence": Metric("first_divergence_median", "first divergence (median, tokens)",
                               "first divergence: how many tokens the cached text matches the exact decoder's "
                               "before they part (an identical text counts whole), median over the prompts",
                               share=False),
}
SPEEDUP = "speedup: the exact decoder's measured compute time over this setting's, on the same prompts"
NO_ACCURACY = "agreement"  # the y axis shown for accuracy when no prompt has a known answer (your own prompts)
TABLE_HEADERS = ["policy", "tau", "k", "speedup", "ceiling", "accuracy", "repeats", "agreement", "in text",
                 "first div. (median)", "rows", "full steps", "by entropy", "decision"]
K_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b"]
PLOT_HEIGHT = 440  # px
FRONT_COLOR = "#ff7f0e"


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points that no other point dominates (at least as good on both axes, better on
    one), ordered by x: the trade-off curve of higher-is-better x and y."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy in points)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i])


def shown_metric(rows: list[dict], metric: str) -> str:
    """The y axis drawn for `metric`: accuracy needs prompts with known answers (not your own)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    if metric == "accuracy" and rows and rows[0]["accuracy"] is None:
        return NO_ACCURACY
    return metric


def pareto_placeholder() -> go.Figure:
    """The plot before a sweep: what it will show."""
    return empty_figure("EntropyCache: speedup against the y axis picked, one point per (tau, k)",
                        "each setting's measured speedup over the exact decoder, against its accuracy, agreement or "
                        "first divergence:<br>drawn prompt by prompt once you press Run sweep", PLOT_HEIGHT)


def pareto_figure(rows: list[dict], metric: str, selected: tuple[float, int] | None = None) -> go.Figure:
    """Speedup (x) against `metric` (y) for every entropy row; `none` at its reference point (1x)."""
    shown = shown_metric(rows, metric)
    m = METRICS[shown]
    points = [r for r in rows if r["policy"] == "entropy"]
    fig = go.Figure()
    for color, k in zip(K_COLORS, sorted({r["params"]["k"] for r in points})):
        mine = [r for r in points if r["params"]["k"] == k]
        fig.add_trace(go.Scatter(
            x=[r["speedup"] for r in mine], y=[r[m.field] for r in mine], mode="markers+text", name=f"k = {k}",
            text=[f"{r['params']['tau']:g}" for r in mine], textposition="top center",
            customdata=[[r["params"]["tau"], k] for r in mine],
            marker=dict(size=12, color=color, line=dict(width=1, color="#333")),
            hovertemplate=(f"tau %{{customdata[0]}}, k %{{customdata[1]}}<br>speedup %{{x:.2f}}x<br>{shown} "
                           "%{y:.3f}<br>click to see its texts and load these settings<extra></extra>"),
        ))
    front = pareto_front([(r["speedup"], r[m.field]) for r in points])
    if len(front) > 1:
        fig.add_trace(go.Scatter(x=[points[i]["speedup"] for i in front], y=[points[i][m.field] for i in front],
                                 mode="lines", name="Pareto front", line=dict(color=FRONT_COLOR, dash="dot"),
                                 hoverinfo="skip"))
    for r in rows[:1]:  # the reference (normally none, shown as vanilla) sits at 1x by definition
        name = shown_policy(r["label"])
        fig.add_trace(go.Scatter(x=[r["speedup"]], y=[r[m.field]], mode="markers+text", name=name,
                                 text=[name], textposition="bottom center", hoverinfo="skip",
                                 marker=dict(size=10, color="#888", symbol="square")))
    if selected is not None:
        chosen = [r for r in points if (r["params"]["tau"], r["params"]["k"]) == selected]
        fig.add_trace(go.Scatter(x=[r["speedup"] for r in chosen], y=[r[m.field] for r in chosen], mode="markers",
                                 name="picked", hoverinfo="skip",
                                 marker=dict(size=22, color="rgba(0,0,0,0)", line=dict(width=3, color="#d62728"))))
    n = rows[0]["n"] if rows else 0
    title = f"EntropyCache: speedup vs {shown} over {n} prompt{'s' * (n != 1)} (labels: tau)"
    if shown != metric:
        title += "; no accuracy: these prompts have no known answers"
    top = max([r[m.field] for r in rows] + [1]) * 1.08
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=PLOT_HEIGHT, margin=dict(MARGIN, b=130),
                      template="plotly_white", xaxis=dict(title=SPEEDUP.split(":")[0] + " over the exact decoder"),
                      yaxis=dict(title=m.title, range=[0, 1.08 if m.share else top]),
                      legend=dict(orientation="h", y=-0.18))
    fig.add_annotation(text=f"x, {SPEEDUP}<br>y, {m.meaning}", xref="paper", yref="paper", x=0, y=-0.36,
                       yanchor="top", xanchor="left", align="left", showarrow=False, font=dict(size=11, color="#555"))
    return fig


def sweep_table(rows: list[dict]) -> list[list]:
    """One line per bench row, in TABLE_HEADERS order (no accuracy, no story events to repeat, no
    answer text: '-'). `in text`: agreement over the exact decoder's answer, before its end-of-text."""
    out = []
    for r in rows:
        tau, k = r["params"].get("tau", ""), r["params"].get("k", "")
        accuracy = "-" if r["accuracy"] is None else round(r["accuracy"], 3)
        repeats = "-" if r["repeat_share"] is None else round(r["repeat_share"], 3)  # beside a story's pass
        in_text = "-" if r["agreement_in_text"] is None else round(r["agreement_in_text"], 4)
        by_entropy = "-" if r["full_steps_entropy"] is None else round(r["full_steps_entropy"], 3)
        out.append([shown_policy(r["policy"]), tau, k, round(r["speedup"], 2), round(r["ceiling"], 2), accuracy,
                    repeats, round(r["agreement"], 4), in_text, r["first_divergence_median"],
                    round(r["rows_fraction"], 3), round(r["full_steps_fraction"], 3), by_entropy,
                    f"{r['decision_overhead']:.2%}"])
    return out


def progress_html(p: Progress, n_prompts: int, label: str = "Sweep") -> str:
    """A progress bar over the sweep's decodes, saying how many of them are the warm-up (decoded first and
    kept out of the timings), and the prompts done."""
    warm = f" (the first {p.warmup} a warm-up, untimed)" if p.warmup else ""
    text = f"{html.escape(label)}: {p.decodes} of {p.total} decodes{warm}, {p.problems} of {n_prompts} prompts done"
    return banner(f'{text} <progress id="sweep-progress" value="{p.decodes}" max="{p.total}"></progress>')
