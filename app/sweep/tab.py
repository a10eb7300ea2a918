"""The Sweep tab: a tau x k sweep of EntropyCache on held-out stories or word problems, run in the
background with a progress bar, drawn as a Pareto plot of speedup against accuracy or agreement.
Clicking a point (or a table row) loads its tau and k into the Race and Drift tabs.

A click reaches the server through a hidden textbox: SWEEP_JS (given to launch) listens for
plotly's click on the plot and writes the point's (tau, k) there. The server checks those values
against the controls' bounds like any other input; a table row is looked up in the session's own results.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import gradio as gr
import pandas as pd
from gradio.blocks import Block

from app.controls.declared import DECODE_CONTROLS
from app.controls.panel import Inputs, bounded_slider, wire_run
from app.serving.context import AppContext
from app.serving.runner import Outputs, TabRunner, TabView
from app.sweep.decode import (
    DECODING,
    DEFAULT_KS,
    DEFAULT_TAUS,
    MAX_KS,
    MAX_PROBLEMS,
    MAX_TAUS,
    PROBLEMS,
    TASKS,
    SweepParams,
    parse_point,
    parse_sweep,
)
from app.sweep.render import METRICS, TABLE_HEADERS, pareto_figure, progress_html, sweep_table
from app.widgets.banner import banner
from core.bench import Progress

SWEEP_GPU_DURATION_S = 600  # a sweep is many decodes: ZeroGPU ends it at this bound (what finished is shown)
SWEEP_OOM = "Out of GPU memory: try a shorter gen length."
INTRO = f"""### Tune tau by looking
The exact decoder and EntropyCache at every (tau, k) you list decode the same held-out prompts of one
task, interleaved, exactly as `python -m core bench` does; each point is one setting's measured speedup
against its accuracy (or its token agreement with the exact decoder). A story is accurate when the
story grammar's checker passes it; it has real choices, so tau moves the points far more there than
on word problems. Points on the dotted Pareto front are the settings worth choosing between.
**Click a point** (or a table row) to load its tau and k into the Race and Drift tabs. Up to
{MAX_TAUS} tau values, {MAX_KS} k values and {MAX_PROBLEMS} prompts."""
DONE = ("Sweep done: {n} problem{s}. Click a point (or a table row) to load its tau and k into the Race and "
        "Drift tabs.")

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


@dataclass(frozen=True)
class SweepResult:
    """The session's last sweep (kept in gr.State): its rows, and the point loaded from it, if any."""
    params: SweepParams
    rows: list[dict]
    selected: tuple[float, int] | None = None


@dataclass(frozen=True)
class SweepPanels:
    status: gr.HTML
    plot: gr.Plot
    loaded: gr.Markdown  # what a picked point loaded
    table: gr.Dataframe
    result: gr.State  # the session's last sweep (a SweepResult)

    def outputs(self) -> list[Block]:
        """What a sweep updates, in the HTTP API's order (`/sweep`; the state stays server-side)."""
        return [self.status, self.plot, self.table, self.result]

    def drawn(self, result: SweepResult, metric: str) -> Outputs:
        return {self.plot: pareto_figure(result.rows, metric, result.selected), self.table: _frame(result.rows),
                self.result: result}


class SweepView(TabView):
    """One sweep in the tab's panels. The plot and table are redrawn only when a problem has finished
    (the points move only then); the end repeats the whole result."""

    def __init__(self, params: SweepParams, metric: str, panels: SweepPanels) -> None:
        super().__init__(params.model, panels.status)
        self.params, self.metric, self.panels = params, metric, panels
        self.shown = 0  # problems drawn so far
        self.last: Progress | None = None
        self.drawn: Outputs | None = None

    def start(self, model, tokenizer) -> tuple[Outputs, SweepParams]:
        p = self.panels
        return self.message("Warming up...") | {p.plot: None, p.table: None, p.result: None}, self.params

    def show(self, progress: Progress) -> Outputs:
        self.last = progress
        status = {self.panels.status: progress_html(progress, self.params.problems)}
        if progress.problems == self.shown:
            return status
        self.shown = progress.problems
        self.drawn = self.panels.drawn(SweepResult(self.params, progress.rows), self.metric)
        return status | self.drawn

    def end(self) -> Outputs | None:
        """The whole result again, under the final banner: an API client's answer."""
        if self.drawn is None or self.last.decodes != self.last.total:
            return None
        n = self.params.problems
        return self.message(DONE.format(n=n, s="s" * (n != 1))) | self.drawn


class SweepTab:
    """The Sweep tab's handlers; a picked point loads into the tau and k sliders of `targets` (the Race's
    and the Drift tab's input panels)."""

    def __init__(self, ctx: AppContext, panels: SweepPanels, targets: Sequence[Inputs]) -> None:
        self.ctx, self.panels, self.targets = ctx, panels, targets
        self.runner = TabRunner(ctx, SWEEP_GPU_DURATION_S, SWEEP_OOM, turn_per_snapshot=True)

    def run(
        self, model: str, task: str, taus: str, ks: str, problems: float, gen_len: float, block_len: float,
        steps: float, threshold: float, metric: str, request: gr.Request = None,
    ) -> Iterator[Outputs]:
        """Check, then stream the sweep: the banner after each decode, the plot and table after each problem."""

        def view() -> SweepView:
            params = parse_sweep(model, task, taus, ks, problems, gen_len, block_len, steps, threshold,
                                 models=self.ctx.registry.labels, graphs=self.ctx.registry.graphs)
            for item in params.items():  # a model that never learned the task is told so before decoding
                self.ctx.registry.check_prompt(params.model, item.prompt)
            return SweepView(params, _metric(metric), self.panels)

        yield from self.runner.run(request, view)

    def picked_outputs(self) -> list[Block]:
        """What a picked point updates, in the HTTP API's order (`/sweep_pick`): each target's tau and k,
        the message, the plot, the state."""
        sliders = [ins.controls[key] for ins in self.targets for key in ("tau", "k")]
        return [*sliders, self.panels.loaded, self.panels.plot, self.panels.result]

    def on_model(self, label: str) -> tuple[int, int]:
        """A model's own gen and block length."""
        c = self.ctx.registry.choice(label)
        return c.gen_len, c.block_len

    def redraw(self, metric: str, result: SweepResult | None):
        """The plot again with another y axis (no decoding)."""
        if result is None:
            return None
        return pareto_figure(result.rows, _metric(metric), result.selected)

    def pick_point(self, value: str, metric: str, result: SweepResult | None) -> Outputs:
        """A clicked point: '[tau, k, nonce]' from SWEEP_JS, checked like any other input."""
        try:
            tau, k = parse_point(value)
        except ValueError as e:
            raise gr.Error(str(e), print_exception=False) from None
        return self._load(tau, k, metric, result)

    def pick_row(self, metric: str, result: SweepResult | None, evt: gr.SelectData) -> Outputs:
        """A clicked table row, looked up in the session's own results."""
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if result is None or not isinstance(row, int) or not 0 <= row < len(result.rows):
            return gr.skip()  # not a row of this session's results: nothing changes
        params = result.rows[row]["params"]
        if "tau" not in params:
            return {self.panels.loaded: "That row is the exact decoder: pick an EntropyCache row."}
        return self._load(params["tau"], params["k"], metric, result)

    def _load(self, tau: float, k: int, metric: str, result: SweepResult | None) -> Outputs:
        """tau and k into every target, what was loaded said, and the point marked on the plot."""
        out = {ins.controls[key]: value for ins in self.targets for key, value in (("tau", tau), ("k", k))}
        message = f"Loaded **tau {tau:g}, k {k}** into the Race and Drift tabs."
        if result is None:
            return out | {self.panels.loaded: message}
        p, c = result.params, result.params.config
        message += (f" The sweep decoded {p.task} with gen length {c.gen_len}, block length {c.block_len}, steps "
                    f"{c.steps or 'one token each'}, threshold {c.threshold or 0:g}.")
        chosen = SweepResult(p, result.rows, (tau, k))
        return out | {self.panels.loaded: message, self.panels.plot: pareto_figure(result.rows, _metric(metric),
                                                                                  chosen.selected),
                      self.panels.result: chosen}


def _metric(metric: object) -> str:
    """The y axis a handler was sent, checked (every handler that draws takes one from the client)."""
    if metric not in METRICS:
        raise gr.Error(f"Unknown y axis {metric!r}; choose one of: {', '.join(METRICS)}.", print_exception=False)
    return str(metric)


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(sweep_table(rows), columns=TABLE_HEADERS)


def build_sweep_tab(ctx: AppContext, load_into: Sequence[Inputs]) -> SweepTab:
    """The tab's layout and events (call inside a gr.Tab). load_into: the input panels whose tau and k a
    picked point sets (the Race's and the Drift tab's)."""
    registry = ctx.registry
    first = registry.choice(registry.labels[0])
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=3):
            taus = gr.Textbox(DEFAULT_TAUS, label="tau values (nats, comma separated)", elem_id="sweep-taus")
            ks = gr.Textbox(DEFAULT_KS, label="k values (comma separated)", elem_id="sweep-ks")
        with gr.Column(scale=2):
            model = gr.Dropdown(registry.labels, value=first.label, label="Model")
            task = gr.Radio(list(TASKS), value=next(iter(TASKS)), label="held-out task", elem_id="sweep-task")
            problems = bounded_slider(PROBLEMS, prefix="sweep-")
            with gr.Row():
                run = gr.Button("Run sweep", variant="primary", elem_id="sweep-run-btn")
                stop = gr.Button("Stop", variant="stop", elem_id="sweep-stop-btn")
    with gr.Accordion("Decoding", open=False):
        with gr.Row():
            defaults = {"gen_len": first.gen_len, "block_len": first.block_len}
            decoding = [bounded_slider(DECODE_CONTROLS[key], defaults.get(key), "sweep-") for key in DECODING]
    status = gr.HTML(banner("Press Run sweep to start."), elem_id="sweep-banner")
    metric = gr.Radio(list(METRICS), value="accuracy", label="y axis", elem_id="sweep-metric")
    panels = SweepPanels(
        status=status,
        plot=gr.Plot(label="Pareto plot", show_label=False, elem_id="sweep-pareto"),
        loaded=gr.Markdown(elem_id="sweep-loaded"),
        table=gr.Dataframe(headers=TABLE_HEADERS, label="Sweep points", interactive=False, elem_id="sweep-table"),
        result=gr.State(None),
    )
    pick = gr.Textbox(visible="hidden", elem_id="sweep-pick")
    tab = SweepTab(ctx, panels, load_into)

    wire_run(run, stop, ctx, tab.run, [model, task, taus, ks, problems, *decoding, metric], panels.outputs(), "sweep",
             status)
    model.change(tab.on_model, model, decoding[:2], api_visibility="private")
    metric.change(tab.redraw, [metric, panels.result], panels.plot, queue=False, api_visibility="private")
    picked = tab.picked_outputs()
    pick.change(tab.pick_point, [pick, metric, panels.result], picked, queue=False, api_name="sweep_pick")
    panels.table.select(tab.pick_row, [metric, panels.result], picked, queue=False, api_visibility="private")
    return tab
