"""The decision-cost figure: each policy's decision time per step against the prompt length.

Reads the JSON rows of a context sweep (`python -m evaluation bench --shots 0,2,4,8 --json FILE`) and
writes an HTML figure (plotly) beside a Markdown table of the same numbers:

    python scripts/decision_cost_figure.py runs/context_sweep.json docs/decision_cost.html
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import plotly.graph_objects as go


def series(rows: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """label -> [(mean prompt tokens, decision microseconds per step)], by prompt length."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        out.setdefault(r["label"], []).append((r["prompt_len"], r["decision_us_per_step"]))
    return {label: sorted(points) for label, points in out.items()}


def figure(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    for label, points in series(rows).items():
        x, y = zip(*points)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=label))
    fig.update_layout(title="Decision cost per step against context length (measured)",
                      xaxis_title="prompt tokens (mean over the problems)",
                      yaxis=dict(title="decision time per step (microseconds)", type="log"),
                      template="plotly_white")
    return fig


def table(rows: list[dict]) -> str:
    """Markdown: one row per policy, one column per context length, decision us/step."""
    lengths = sorted({round(r["prompt_len"]) for r in rows})
    lines = ["| policy | " + " | ".join(f"{n} tokens" for n in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    for label, points in series(rows).items():
        lines.append(f"| {label} | " + " | ".join(f"{us:.0f}" for _, us in points) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=Path, help="JSON rows of a context sweep")
    ap.add_argument("out", type=Path, help="the HTML figure to write")
    args = ap.parse_args(argv)
    rows = json.loads(args.rows.read_text())
    if not rows or "decision_us_per_step" not in rows[0]:
        ap.error(f"{args.rows} holds no bench rows with decision_us_per_step")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure(rows).write_html(args.out, include_plotlyjs="cdn")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
