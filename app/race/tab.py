"""The Race tab: the compared policy and EntropyCache decode one prompt on one shared compute clock,
streamed into two lanes of panels (speed, text, entropy trace, recomputed rows), then the results.

The handler validates its input (app/controls/declared.py, and whether the model can read the prompt) and runs
through the tab runner (app/serving/runner.py); the race itself is app/race/render.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import gradio as gr
import pandas as pd

from app.controls.declared import compared_policies
from app.controls.panel import Inputs, build_inputs, raw_run, run_signature, wire_inputs
from app.controls.run import Run, check_run
from app.race.decode import race_snapshots
from app.race.render import SIDES, RaceRenderer, Update
from app.race.replay_panel import build_replay_panel
from app.race.speed import SUMMARY_HEADERS
from app.serving.context import AppContext
from app.serving.runner import TabRunner, TabView
from app.widgets.banner import banner

INTRO = """# EntropyCache: a decode race
Two decoders unmask the same prompt with the same seed. **Left:** the policy you compare against
(default: no cache, every step recomputes every row). **Right:** EntropyCache, which recomputes the
whole cache only after a step that decoded an uncertain token (max entropy above *tau*).
They advance on one shared clock of measured compute time, so the faster one finishes first. Compute
time is each step's own work (on a CPU, the time the decoding thread spent on its core): drawing this
page and other visitors' runs never count."""
N_FINALS = 4  # the two final texts, the summary, the trace


class RaceView(TabView):
    """One race as the tab's outputs: banner, 2 x 4 lane parts, 2 final texts, summary, trace."""

    n_outputs = 1 + 2 * 4 + N_FINALS

    def __init__(self, run: Run) -> None:
        self.run = run
        self.label = run.model
        self.renderer: RaceRenderer | None = None

    def loading(self, text: str) -> tuple:
        return (banner(text), *(gr.skip(),) * 8, *_cleared())  # the previous run's results go at once

    def start(self, model, tokenizer) -> tuple[tuple, tuple]:
        self.renderer = RaceRenderer(model, tokenizer, self.run)
        return outputs(self.renderer.empty("Starting..."), clear_final=True), (self.run, self.renderer.prompt_ids)

    def show(self, snapshot) -> tuple:
        return outputs(self.renderer.update(snapshot))


class RaceTab:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.runner = TabRunner(ctx, self.decode)

    def decode(self, model, tokenizer, run: Run, prompt_ids: list[int], should_stop) -> Iterator:
        return race_snapshots(model, prompt_ids, run, self.ctx.throttle_s, should_stop)

    def run(self, *values: object, request: gr.Request = None) -> Iterator[tuple]:
        """Validate, then stream the race: one output tuple per throttled snapshot, the last one with results.

        `values`: RUN_INPUTS (the policy is the compared one); the HTTP API names them (run_signature)."""
        raw, request = raw_run(values, request)
        yield from self.runner.run(request, lambda: RaceView(check_run(self.ctx.registry, raw, compared_policies(),
                                                                       against_ours=True)))


RaceTab.run.__signature__ = run_signature()  # so that the HTTP API names each input (`/run`'s dllm_cache_rho)


def _cleared() -> tuple:
    return ("", "", None, None)


def outputs(update: Update, clear_final: bool = False) -> tuple:
    """An Update as the tuple of component values: banner, 2 x 4 lane parts, 2 final texts, summary, trace."""
    lanes = [x for v in update.lanes for x in (v.speed_html, v.text_html, v.entropy_fig, v.rows_fig)]
    if update.final is not None:
        f = update.final
        finals = (*f.texts, pd.DataFrame(f.summary, columns=SUMMARY_HEADERS), str(f.trace_path))
    elif clear_final:
        finals = _cleared()
    else:
        finals = (gr.skip(),) * N_FINALS
    return (update.banner_html, *lanes, *finals)


def _panels() -> tuple[gr.HTML, list[gr.components.Component], list[gr.Markdown]]:
    """The banner, then per side: speed panel, text, entropy trace, recomputed-rows heatmaps; and per
    side the replay's story of the step on screen, under the text."""
    status = gr.HTML(banner("Press Run to start the race."), elem_id="banner")
    panels, stories = [], []
    with gr.Row(equal_height=False):
        for i, side in enumerate(SIDES):
            with gr.Column(elem_id=f"lane-{i}"):
                panels += [gr.HTML(elem_id=f"speed-{i}"), gr.HTML(label=f"{side}: text", elem_id=f"text-{i}")]
                stories.append(gr.Markdown(elem_id=f"story-{i}"))
                panels += [
                    gr.Plot(label="Entropy trace", show_label=False, elem_id=f"entropy-{i}"),
                    gr.Plot(label="Recomputed rows", show_label=False, elem_id=f"rows-{i}"),
                ]
    return status, panels, stories


def _results() -> list[gr.components.Component]:
    """Final texts side by side, the summary table, the trace download."""
    gr.Markdown("### Result")
    with gr.Row():
        finals = [gr.Textbox(label=f"{side}: final text", lines=3, interactive=False) for side in SIDES]
    summary = gr.Dataframe(headers=SUMMARY_HEADERS, label="Summary", interactive=False)
    trace = gr.File(label="Whole trace (JSON)", interactive=False, height=90, elem_id="trace")
    return [*finals, summary, trace]


def build_race_tab(ctx: AppContext) -> Inputs:
    """The tab's layout and events (call inside a gr.Tab); returns its input panel."""
    tab = RaceTab(ctx)
    gr.Markdown(INTRO)
    ins = build_inputs(ctx.registry)
    status, panels, stories = _panels()
    results = _results()
    wire_inputs(ins, ctx, tab.run, [status, *panels, *results], "run", status)  # the order of `outputs`
    build_replay_panel(status, panels, stories, results[-1], ins.run)
    return ins
