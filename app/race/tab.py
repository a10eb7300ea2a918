"""The Race tab: the compared policy and EntropyCache decode one prompt on one shared compute clock,
streamed into two lanes of panels (speed, text, entropy trace, recomputed rows), then the results.

The handler checks its input once (app/controls/run.py) and runs through the tab runner
(app/serving/runner.py); the race itself is app/race/decode.py, drawn by app/race/render.py into the
panels of app/race/panels.py.
"""

from __future__ import annotations

import gradio as gr

from app.controls.declared import compared_policies
from app.controls.panel import PanelTab, build_inputs, wire_inputs
from app.controls.run import Run
from app.race.decode import RaceJob
from app.race.panels import RacePanels, build_race_panels
from app.race.render import RaceRenderer
from app.race.replay_panel import build_replay_panel
from app.serving.context import AppContext
from app.serving.runner import Outputs, TabView

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


class RaceTab(PanelTab):
    """The compared policy (the pick) against EntropyCache."""

    offered = compared_policies()
    against_ours = True

    def view(self, run: Run) -> RaceView:
        return RaceView(run, self.panels, self.ctx.throttle_s)


def build_race_tab(ctx: AppContext) -> RaceTab:
    """The tab's layout and events (call inside a gr.Tab)."""
    gr.Markdown(INTRO)
    inputs = build_inputs(ctx.registry, policies=RaceTab.offered)
    panels = build_race_panels()
    tab = RaceTab(ctx, inputs, panels)
    wire_inputs(inputs, ctx, tab.run, panels.outputs(), "run", panels.status)
    build_replay_panel(panels, inputs.run)
    return tab
