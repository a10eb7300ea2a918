"""The Race tab: the compared policy and EntropyCache decode one prompt on one shared compute clock,
streamed into two lanes of panels (speed, text, entropy trace, recomputed rows), then the results.

The handler checks its input once (app/controls/run.py) and runs through the tab runner
(app/serving/runner.py); the race itself is app/race/decode.py, drawn by app/race/render.py into the
panels of app/race/panels.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import gradio as gr

from app.controls.declared import compared_policies
from app.controls.panel import Inputs, build_inputs, raw_run, run_signature, wire_inputs
from app.controls.run import Run, check_run
from app.race.decode import RaceJob
from app.race.panels import RacePanels, build_race_panels
from app.race.render import RaceRenderer
from app.race.replay_panel import build_replay_panel
from app.serving.context import AppContext
from app.serving.runner import Outputs, TabRunner, TabView

INTRO = """# EntropyCache: a decode race
Two decoders unmask the same prompt with the same seed. **Left:** the policy you compare against
(default: no cache, every step recomputes every row). **Right:** EntropyCache, which recomputes the
whole cache only after a step that decoded an uncertain token (max entropy above *tau*).
They advance on one shared clock of measured compute time, so the faster one finishes first. Compute
time is each step's own work (on a CPU, the time the decoding thread spent on its core): drawing this
page and other visitors' runs never count."""


class RaceView(TabView):
    """One race in the tab's panels."""

    def __init__(self, run: Run, panels: RacePanels, throttle_s: float) -> None:
        super().__init__(run.model, panels.status)
        self.run, self.panels, self.throttle_s = run, panels, throttle_s
        self.renderer: RaceRenderer | None = None

    def loading(self, text: str) -> Outputs:
        return self.message(text) | self.panels.cleared()  # the previous race's results go at once

    def start(self, model, tokenizer) -> tuple[Outputs, RaceJob]:
        self.renderer = RaceRenderer(model, tokenizer, self.run)
        first = self.panels.show(self.renderer.empty("Starting...")) | self.panels.cleared()
        return first, RaceJob(self.run, self.renderer.prompt_ids, self.throttle_s)

    def show(self, snapshot) -> Outputs:
        return self.panels.show(self.renderer.update(snapshot))


class RaceTab:
    def __init__(self, ctx: AppContext, inputs: Inputs, panels: RacePanels) -> None:
        self.ctx, self.inputs, self.panels = ctx, inputs, panels
        self.runner = TabRunner(ctx)

    def run(self, *values: object, request: gr.Request = None) -> Iterator[Outputs]:
        """Check, then stream the race: the panels after each throttled snapshot, the last one with results.

        `values`: RUN_INPUTS (the policy is the compared one); the HTTP API names them (run_signature)."""
        raw, request = raw_run(values, request)

        def view() -> RaceView:
            run = check_run(self.ctx.registry, raw, compared_policies(), against_ours=True)
            return RaceView(run, self.panels, self.ctx.throttle_s)

        yield from self.runner.run(request, view)


RaceTab.run.__signature__ = run_signature()  # so that the HTTP API names each input (`/run`'s dllm_cache_rho)


def build_race_tab(ctx: AppContext) -> RaceTab:
    """The tab's layout and events (call inside a gr.Tab)."""
    gr.Markdown(INTRO)
    inputs = build_inputs(ctx.registry)
    panels = build_race_panels()
    tab = RaceTab(ctx, inputs, panels)
    wire_inputs(inputs, ctx, tab.run, panels.outputs(), "run", panels.status)
    build_replay_panel(panels, inputs.run)
    return tab
