"""The Sweep tab: a tau x k sweep of EntropyCache on held-out stories or word problems, run in the
background with a progress bar, drawn as a Pareto plot of speedup against accuracy or agreement.
Clicking a point (or a table row) loads its tau and k into the Race and Drift tabs.

A click reaches the server through a hidden textbox: SWEEP_JS (given to launch) listens for
plotly's click on the plot and writes the point's (tau, k) there. The server checks those values
against the bounds like any other input; a table row is looked up in the session's own results.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from app.controls.declared import DECODE_CONTROLS
from app.controls.panel import bounded_slider, wire_run
from app.serving.context import AppContext
from app.serving.runner import TabRunner, TabView
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
    sweep_snapshots,
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


class SweepView(TabView):
    """One sweep as the tab's outputs: banner, plot, table, state. The plot and table are redrawn only
    when a problem has finished (the points move only then); the end repeats the whole result."""

    n_outputs = 4

    def __init__(self, params: SweepParams, metric: str) -> None:
        self.params, self.metric = params, metric
        self.label = params.model
        self.shown = 0  # problems drawn so far
        self.last: Progress | None = None
        self.drawn: tuple | None = None

    def start(self, model, tokenizer) -> tuple[tuple, tuple]:
        return (banner("Warming up..."), None, None, None), (self.params,)

    def show(self, progress: Progress) -> tuple:
        self.last = progress
        status = progress_html(progress, self.params.problems)
        if progress.problems == self.shown:
            return status, gr.skip(), gr.skip(), gr.skip()
        self.shown = progress.problems
        self.drawn = (pareto_figure(progress.rows, self.metric), _frame(progress.rows),
                      SweepResult(self.params, progress.rows))
        return status, *self.drawn

    def end(self) -> tuple | None:
        """The whole result again, under the final banner: an API client's answer."""
        if self.drawn is None or self.last.decodes != self.last.total:
            return None
        n = self.params.problems
        return banner(DONE.format(n=n, s="s" * (n != 1))), *self.drawn


class SweepTab:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.runner = TabRunner(ctx, sweep_snapshots, SWEEP_GPU_DURATION_S, SWEEP_OOM, turn_per_snapshot=True)

    def run(
        self, model: str, task: str, taus: str, ks: str, problems: float, gen_len: float, block_len: float,
        steps: float, threshold: float, metric: str, request: gr.Request = None,
    ) -> Iterator[tuple]:
        """Validate, then stream the sweep: banner, plot, table, state after each decode."""

        def validate() -> SweepView:
            params = parse_sweep(model, task, taus, ks, problems, gen_len, block_len, steps, threshold,
                                 models=self.ctx.registry.labels)
            for item in params.items():  # a model that never learned the task is told so before decoding
                self.ctx.registry.check_prompt(params.model, item.prompt)
            return SweepView(params, _metric(metric))

        yield from self.runner.run(request, validate)

    def on_model(self, label: str) -> tuple[int, int]:
        """A model's own gen and block length."""
        c = self.ctx.registry.choice(label)
        return c.gen_len, c.block_len

    def redraw(self, metric: str, result: SweepResult | None):
        """The plot again with another y axis (no decoding)."""
        if result is None:
            return None
        return pareto_figure(result.rows, _metric(metric), result.selected)

    def pick_point(self, value: str, metric: str, result: SweepResult | None) -> tuple:
        """A clicked point: '[tau, k, nonce]' from SWEEP_JS, checked like any other input."""
        try:
            tau, k = parse_point(value)
        except ValueError as e:
            raise gr.Error(str(e), print_exception=False) from None
        return self._load(tau, k, metric, result)

    def pick_row(self, metric: str, result: SweepResult | None, evt: gr.SelectData) -> tuple:
        """A clicked table row, looked up in the session's own results."""
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if result is None or not isinstance(row, int) or not 0 <= row < len(result.rows):
            return (gr.skip(),) * 7
        params = result.rows[row]["params"]
        if "tau" not in params:
            return (*(gr.skip(),) * 4, "That row is the exact decoder: pick an EntropyCache row.", gr.skip(), gr.skip())
        return self._load(params["tau"], params["k"], metric, result)

    def _load(self, tau: float, k: int, metric: str, result: SweepResult | None) -> tuple:
        """race tau, race k, drift tau, drift k, message, plot, state."""
        message = f"Loaded **tau {tau:g}, k {k}** into the Race and Drift tabs."
        if result is None:
            return tau, k, tau, k, message, gr.skip(), gr.skip()
        p = result.params
        c = p.config
        message += (f" The sweep decoded {p.task} with gen length {c.gen_len}, block length {c.block_len}, steps "
                    f"{c.steps or 'one token each'}, threshold {c.threshold or 0:g}.")
        chosen = SweepResult(p, result.rows, (tau, k))
        return tau, k, tau, k, message, pareto_figure(result.rows, _metric(metric), chosen.selected), chosen


def _metric(metric: object) -> str:
    """The y axis a handler was sent, checked (every handler that draws takes one from the client)."""
    if metric not in METRICS:
        raise gr.Error(f"Unknown y axis {metric!r}; choose one of: {', '.join(METRICS)}.", print_exception=False)
    return str(metric)


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(sweep_table(rows), columns=TABLE_HEADERS)


def build_sweep_tab(ctx: AppContext, load_into: list[gr.Slider]) -> None:
    """The tab's layout and events (call inside a gr.Tab). load_into: the sliders a picked point sets,
    in the order race tau, race k, drift tau, drift k."""
    tab = SweepTab(ctx)
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
    plot = gr.Plot(label="Pareto plot", show_label=False, elem_id="sweep-pareto")
    loaded = gr.Markdown(elem_id="sweep-loaded")
    table = gr.Dataframe(headers=TABLE_HEADERS, label="Sweep points", interactive=False, elem_id="sweep-table")
    pick = gr.Textbox(visible="hidden", elem_id="sweep-pick")
    state = gr.State(None)

    wire_run(run, stop, ctx, tab.run, [model, task, taus, ks, problems, *decoding, metric],
             [status, plot, table, state], "sweep", status)
    model.change(tab.on_model, model, decoding[:2], api_visibility="private")
    metric.change(tab.redraw, [metric, state], plot, queue=False, api_visibility="private")
    picked = [*load_into, loaded, plot, state]
    pick.change(tab.pick_point, [pick, metric, state], picked, queue=False, api_name="sweep_pick")
    table.select(tab.pick_row, [metric, state], picked, queue=False, api_visibility="private")
