"""The Sweep tab's panels: the banner, the Pareto plot and its y axis, the points' table, the downloads
and the picked point's texts, with the page script and the hidden box a click on the plot reaches the
server through, and how a sweep's result fills them. The handlers that fill them are app/sweep/tab.py.

Every output has a name (SWEEP_OUTPUTS for `/sweep`, pick_names for `/sweep_pick`, in the HTTP API's
order), declared once: a client reads the outputs by it (app/client.py), not by position.

A click reaches the server through a hidden textbox: SWEEP_JS (given to launch) listens for plotly's
click on the plot and writes the point's (tau, k) there. The server checks those values against the
controls' bounds like any other input; a table row is looked up in the session's own results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gradio as gr
import pandas as pd
from gradio.blocks import Block

from app.controls.panel import as_sent
from app.serving.runner import Outputs
from app.sweep.decode import SweepParams
from app.sweep.point import PICK_HINT
from app.sweep.render import METRICS, TABLE_HEADERS, pareto_figure, pareto_placeholder, shown_metric, sweep_table
from app.widgets.banner import banner

# Plotly's click event -> the hidden #sweep-pick textbox (a nonce makes every click a new value) -> its
# `change` event on the server. Plots are re-rendered as the sweep streams, so the listener is
# (re)attached whenever the page changes.
SWEEP_JS = """
() => {
  const attach = () => {
    const plot = document.querySelector('#sweep-pareto .js-plotly-plot');
    if (!plot || typeof plot.on !== 'function' || plot._ecClick === plot._fullData) return;
    plot._ecClick = plot._fullData;
    plot.removeAllListeners && plot.removeAllListeners('plotly_click');
    plot.on('plotly_click', (ev) => {
      const point = ev && ev.points && ev.points[0];
      const box = document.querySelector('#sweep-pick textarea, #sweep-pick input');
      if (!point || !Array.isArray(point.customdata) || !box) return;
      box.value = JSON.stringify([point.customdata[0], point.customdata[1], Date.now()]);
      box.dispatchEvent(new Event('input', {bubbles: true}));
    });
  };
  new MutationObserver(attach).observe(document.body, {childList: true, subtree: true});
  attach();
}
"""


# What `/sweep` returns, by name, in order; `/sweep_pick` returns pick_names (app/client.py reads both so).
SWEEP_OUTPUTS = ("status", "plot", "table", "point", "downloads", "metric")
LOADED = ("tau", "k")  # what a picked point loads into each target panel
PICK_OUTPUTS = ("loaded", "plot", "point", "status")


def pick_names(targets: Sequence[str]) -> tuple[str, ...]:
    """`/sweep_pick`'s outputs, by name, in order: each target panel's (by its tab's name) tau and k, then
    PICK_OUTPUTS."""
    return (*(f"{target}.{key}" for target in targets for key in LOADED), *PICK_OUTPUTS)


@dataclass(frozen=True)
class SweepResult:
    """The session's last sweep (kept in gr.State): its rows, the text of every token in them (and what
    joins two tokens' text), and the point picked from it, if any."""
    params: SweepParams
    rows: list[dict]
    pieces: dict[int, str]
    sep: str
    selected: tuple[float, int] | None = None


@dataclass(frozen=True)
class SweepPanels:
    status: gr.HTML
    plot: gr.Plot
    loaded: gr.Markdown  # what a picked point loaded
    point: gr.HTML  # a picked point's texts beside the exact decoder's
    table: gr.Dataframe
    downloads: gr.File  # the points and texts (CSV), everything (JSON), your prompts
    metric: gr.Radio  # the y axis: it says what the plot draws (agreement where accuracy was asked of your prompts)
    result: gr.State  # the session's last sweep (a SweepResult)

    def outputs(self) -> list[Block]:
        """What a sweep updates: SWEEP_OUTPUTS in the HTTP API's order, then the session's result, which
        stays server-side."""
        return [*(getattr(self, name) for name in SWEEP_OUTPUTS), self.result]

    def drawn(self, result: SweepResult, metric: str) -> Outputs:
        """The plot and table of `result`, the y axis radio set to what the plot draws."""
        return {self.plot: pareto_figure(result.rows, metric, result.selected), self.table: _frame(result.rows),
                self.metric: shown_metric(result.rows, metric), self.result: result}


@dataclass(frozen=True)
class PointPicker:
    """What picks a point besides a table row: the hidden box SWEEP_JS writes a click on the plot into,
    and the buttons to the next point along tau."""
    pick: gr.Textbox
    lower: gr.Button
    higher: gr.Button


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(sweep_table(rows), columns=TABLE_HEADERS)


def build_sweep_panels() -> tuple[SweepPanels, PointPicker]:
    """The banner, the y axis, the plot, the table, the downloads, then the picked point's texts under
    the buttons that move along tau (call inside the Sweep tab, under its inputs)."""
    status = gr.HTML(banner("Press Run sweep to start."), elem_id="sweep-banner")
    metric = as_sent(gr.Radio(list(METRICS), value="accuracy", label="y axis", elem_id="sweep-metric"))
    plot = gr.Plot(pareto_placeholder(), label="Pareto plot", show_label=False, elem_id="sweep-pareto")
    table = gr.Dataframe(headers=TABLE_HEADERS, label="Sweep points", interactive=False, elem_id="sweep-table")
    downloads = gr.File(label="Download: points (CSV), texts (CSV), everything (JSON), your prompts", interactive=False,
                        file_count="multiple", elem_id="sweep-downloads")
    gr.Markdown("### The picked point's texts")
    with gr.Row():
        loaded = gr.Markdown(elem_id="sweep-loaded")
        lower = gr.Button("< lower tau", scale=0, elem_id="sweep-lower")
        higher = gr.Button("higher tau >", scale=0, elem_id="sweep-higher")
    point = gr.HTML(PICK_HINT, elem_id="sweep-point")
    panels = SweepPanels(status, plot, loaded, point, table, downloads, metric, gr.State(None))
    pick = gr.Textbox(visible="hidden", elem_id="sweep-pick")
    return panels, PointPicker(pick, lower, higher)
