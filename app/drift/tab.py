"""The Drift tab: a diagnostic decode of the picked policy (evaluation's Probe hook) streamed into four
figures, and an Explain panel that describes any step of the finished decode in plain language.

The handler checks its input as the Race tab's does (app/controls/run.py) and runs through the tab
runner (app/serving/runner.py): one run per browser session across tabs.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.blocks import Block

from app.controls.declared import probed_policies
from app.controls.panel import ControlsTab, build_inputs, raw_slider, wire_inputs
from app.drift.decode import drift_snapshots
from app.drift.plots import placeholder
from app.drift.render import DriftRenderer, DriftRun, DriftUpdate
from app.serving.context import AppContext
from app.serving.runner import Outputs
from app.widgets.banner import banner, refuses
from app.widgets.intro import tab_intro
from core.refusal import shown

NO_RUN = "Run a diagnostic decode first; then pick a step here."
INTRO = """### Drift diagnostics
Does entropy say when the cache has gone stale? The picked policy decodes the prompt with a probe on, and
the plots set how far each step moved the K/V against the entropy of what it decoded. Try a story and a
word problem from the examples to see where entropy predicts drift and where it does not."""
HOW_IT_WORKS = """The picked policy (EntropyCache, or one of the caches it is compared with) decodes the
prompt with a probe on. Before each step the probe runs a full forward of the current tokens and measures
how far the last step's decode moved every row's K/V (*drift*, as the paper means it), set against the
entropy of what that step decoded and split into the rows the next step recomputes and the rows it reuses
from the cache (what the cache risks); how stale the policy's own cache has grown since its last full
step; and how much a decoded token's K/V still changes from one step to the next (*volatility*). Steps
after an end-of-text and into a block's first step are marked apart: their drift says nothing about
entropy. The probe's forward is in no step's time. *Explain a step* tells each step in the policy's own
words."""


# What `/drift` returns, by name, in order (app/client.py reads them so).
DRIFT_OUTPUTS = ("status", "text", "scatter", "staleness", "heatmap", "volatility", "final", "step", "explanation")


@dataclass(frozen=True)
class DriftPanels:
    status: gr.HTML
    text: gr.HTML
    scatter: gr.Plot
    staleness: gr.Plot
    heatmap: gr.Plot
    volatility: gr.Plot
    final: gr.Textbox
    record: gr.State  # the session's last finished decode (a DriftRun), for the Explain panel
    step: gr.Slider  # the step explained
    explanation: gr.Markdown

    def outputs(self) -> list[Block]:
        """What a diagnostic decode updates: DRIFT_OUTPUTS in the HTTP API's order, then the session's
        record, which stays server-side."""
        return [*(getattr(self, name) for name in DRIFT_OUTPUTS), self.record]

    def show(self, update: DriftUpdate) -> Outputs:
        """The banner, the text and the figures; at the end, the final text and the Explain panel on the
        last step."""
        out = {self.status: update.banner_html, self.text: update.text_html, self.scatter: update.scatter_fig,
               self.staleness: update.staleness_fig, self.heatmap: update.heatmap_fig,
               self.volatility: update.volatility_fig}
        return out if update.record is None else out | self.finished(update)

    def cleared(self) -> Outputs:
        """A new decode: the previous one's results and explanation go."""
        return {self.final: "", self.record: None, self.explanation: NO_RUN,
                self.step: gr.Slider(minimum=0, maximum=1, value=0, interactive=False)}

    def finished(self, update: DriftUpdate) -> Outputs:
        last = len(update.events) - 1
        return {self.final: update.final_text, self.record: update.record, self.explanation: update.explanation,
                self.step: gr.Slider(minimum=0, maximum=max(last, 1), value=last, interactive=True)}


class DriftTab(ControlsTab, name="drift", renderer=DriftRenderer, decode=drift_snapshots, offered=probed_policies(),
               against_ours=False):
    """The picked policy, probed; and the Explain panel over the decode."""

    def explain(self, step: object, record: DriftRun | None) -> str:
        """The Explain panel's text for step `step` of the session's last finished diagnostic decode (a
        ValueError names a step out of its range)."""
        if record is None or not record.events:
            return NO_RUN
        last = len(record.events) - 1
        if isinstance(step, bool) or not isinstance(step, int | float) or not 0 <= step <= last:  # NaN too
            raise ValueError(f"The step must be a whole number between 0 and {last}, got {shown(step)}.")
        if step != int(step):
            raise ValueError(f"The step must be a whole number, got {step!r}.")
        _, tokenizer = self.ctx.registry.get(record.model)
        return record.explain(int(step), tokenizer)

    @refuses
    def on_step(self, step: object, record: DriftRun | None) -> Outputs:
        """The step slider's handler: the explanation of the step."""
        return {self.panels.explanation: self.explain(step, record)}


# The four figures, two to a row: each by its name (app/drift/plots.py FIGURES) and its label.
PLOT_ROWS = ((("scatter", "K/V change vs entropy"), ("staleness", "Staleness by steps since a full step")),
             (("heatmap", "Staleness per layer and step"), ("volatility", "Volatility")))


def build_drift_panels() -> DriftPanels:
    """The banner, the response, the four figures, the final text and the Explain panel."""
    status = gr.HTML(banner("Press Run diagnostics to start."), elem_id="drift-banner")
    text = gr.HTML(elem_id="drift-text")
    plots = {}
    for row in PLOT_ROWS:
        with gr.Row(equal_height=False):
            for name, label in row:
                plots[name] = gr.Plot(placeholder(name), label=label, show_label=False, elem_id=f"drift-{name}")
    final = gr.Textbox(label="Final text", lines=2, interactive=False, elem_id="drift-final")
    gr.Markdown("### Explain a step")
    # Raw: a step out of range gets the handler's message, which names the step's range.
    step = raw_slider(0, 1, value=0, step=1, label="step", interactive=False, elem_id="drift-step")
    explanation = gr.Markdown(NO_RUN, elem_id="drift-explain")
    return DriftPanels(status, text, **plots, final=final, record=gr.State(None), step=step, explanation=explanation)


def build_drift_tab(ctx: AppContext) -> DriftTab:
    """The tab's layout and events (call inside a gr.Tab)."""
    tab_intro(INTRO, HOW_IT_WORKS, "drift-how-it-works")
    inputs = build_inputs(ctx.registry, prefix="drift-", policies=DriftTab.offered, policy_label="Policy probed",
                          run_label="Run diagnostics")
    panels = build_drift_panels()
    tab = DriftTab(ctx, inputs, panels)
    wire_inputs(inputs, ctx, tab.run, panels.outputs(), "drift", panels.status)
    # change, not release: typing a step into the slider's box counts too. Cheap, so not queued behind decodes.
    panels.step.change(tab.on_step, [panels.step, panels.record], [panels.explanation, panels.status], queue=False,
                       api_visibility="private")
    return tab
