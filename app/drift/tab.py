"""The Drift tab: a diagnostic EntropyCache decode (core's Probe hook) streamed into three figures, and
an Explain panel that describes any step of the finished decode in plain language.

The handler validates as the Race tab's does (app/controls/declared.py, and whether the model can read the
prompt) and runs through the tab runner (app/serving/runner.py): one run per browser session across tabs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from app.controls.declared import probed_policies
from app.controls.panel import Inputs, build_inputs, raw_run, raw_slider, run_signature, wire_inputs
from app.controls.run import Run, check_run
from app.drift.decode import drift_snapshots
from app.drift.render import DriftRenderer, DriftUpdate
from app.serving.context import AppContext
from app.serving.runner import TabRunner, TabView
from app.widgets.banner import banner
from app.widgets.explain import explain_step

NO_RUN = "Run a diagnostic decode first; then pick a step here."
INTRO = """### Drift diagnostics
The picked policy (EntropyCache, or one of the caches it is compared with) decodes the prompt with a probe
on: before each step the probe compares the cache with what a full forward of the current tokens would give
(the *drift*, per layer), and measures how much each decoded token's K/V still changes from one step to the
next (its *volatility*, by steps since it was unmasked). The probe's extra forward is not counted in any
step's time. *Explain a step* tells each step in the policy's own words, layer by layer for the layer-wise
caches."""


@dataclass(frozen=True)
class DriftRun:
    """What the Explain panel needs of a finished decode (kept in the session's gr.State)."""
    model: str  # the model's label: its tokenizer decodes the tokens
    events: tuple  # the StepEvents core yielded, as they came

    def explain(self, i: int, tokenizer) -> str:
        """Step i, told from its own event and the next one's."""
        after = self.events[i + 1] if i + 1 < len(self.events) else None
        return explain_step(self.events[i], after, tokenizer)


class DriftView(TabView):
    """One diagnostic decode as the tab's outputs (drift_outputs)."""

    n_outputs = 9

    def __init__(self, run: Run) -> None:
        self.run = run
        self.label = run.model
        self.renderer: DriftRenderer | None = None
        self.tokenizer = None

    def start(self, model, tokenizer) -> tuple[tuple, tuple]:
        self.renderer = DriftRenderer(model, tokenizer, self.run)
        self.tokenizer = tokenizer
        return drift_outputs(self.renderer.empty("Starting..."), start=True), (self.run, self.renderer.prompt_ids)

    def show(self, snapshot) -> tuple:
        update = self.renderer.update(snapshot)
        record = DriftRun(self.run.model, update.events) if update.final_text is not None else None
        return drift_outputs(update, record, self.tokenizer)


class DriftTab:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.runner = TabRunner(ctx, self.decode)

    def decode(self, model, tokenizer, run: Run, prompt_ids: list[int], should_stop) -> Iterator:
        return drift_snapshots(model, prompt_ids, run, self.ctx.throttle_s, should_stop)

    def run(self, *values: object, request: gr.Request = None) -> Iterator[tuple]:
        """Validate, then stream the diagnostic decode: one output tuple per throttled update.

        `values`: RUN_INPUTS (the policy is the probed one); the HTTP API names them (run_signature)."""
        raw, request = raw_run(values, request)
        yield from self.runner.run(request, lambda: DriftView(check_run(self.ctx.registry, raw, probed_policies(),
                                                                        against_ours=False)))

    def explain(self, step: float, run: DriftRun | None) -> str:
        """The Explain panel's text for step `step` of the session's last finished diagnostic decode."""
        if run is None or not run.events:
            return NO_RUN
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not float(step).is_integer():
            raise gr.Error(f"The step must be a whole number, got {step!r}.", print_exception=False)
        if not 0 <= step < len(run.events):
            raise gr.Error(f"The step must be between 0 and {len(run.events) - 1}, got {step:g}.",
                           print_exception=False)
        _, tokenizer = self.ctx.registry.get(run.model)
        return run.explain(int(step), tokenizer)


DriftTab.run.__signature__ = run_signature()  # so that the HTTP API names each input


def drift_outputs(update: DriftUpdate, run: DriftRun | None = None, tokenizer=None, start: bool = False) -> tuple:
    """banner, text, scatter, heatmap, volatility, final text, run state, step slider, explanation."""
    head = (update.banner_html, update.text_html, update.scatter_fig, update.heatmap_fig, update.volatility_fig)
    if start:  # a new decode: the previous one's results and explanation go
        return (*head, "", None, gr.Slider(minimum=0, maximum=1, value=0, interactive=False), NO_RUN)
    if run is None:
        return (*head, gr.skip(), gr.skip(), gr.skip(), gr.skip())
    last = len(run.events) - 1
    return (*head, update.final_text, run, gr.Slider(minimum=0, maximum=max(last, 1), value=last, interactive=True),
            run.explain(last, tokenizer))


def build_drift_tab(ctx: AppContext) -> Inputs:
    """The tab's layout and events (call inside a gr.Tab); returns its input panel."""
    tab = DriftTab(ctx)
    gr.Markdown(INTRO)
    ins = build_inputs(ctx.registry, prefix="drift-", policies=probed_policies(), policy_label="Policy probed",
                       run_label="Run diagnostics")
    status = gr.HTML(banner("Press Run diagnostics to start."), elem_id="drift-banner")
    text = gr.HTML(elem_id="drift-text")
    with gr.Row(equal_height=False):
        scatter = gr.Plot(label="Drift vs entropy", show_label=False, elem_id="drift-scatter")
        volatility = gr.Plot(label="Volatility", show_label=False, elem_id="drift-volatility")
    heatmap = gr.Plot(label="Drift per layer and step", show_label=False, elem_id="drift-heatmap")
    final = gr.Textbox(label="Final text", lines=2, interactive=False, elem_id="drift-final")
    gr.Markdown("### Explain a step")
    # Raw: a step out of range gets the handler's message, which names the step's range.
    step = raw_slider(0, 1, value=0, step=1, label="step", interactive=False, elem_id="drift-step")
    explanation = gr.Markdown(NO_RUN, elem_id="drift-explain")
    state = gr.State(None)
    outs = [status, text, scatter, heatmap, volatility, final, state, step, explanation]
    wire_inputs(ins, ctx, tab.run, outs, "drift", status)
    # change, not release: typing a step into the slider's box counts too. Cheap, so not queued behind decodes.
    step.change(tab.explain, [step, state], explanation, queue=False, api_visibility="private")
    return ins
