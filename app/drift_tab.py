"""The Drift tab: a diagnostic EntropyCache decode (probe on) streamed into three figures, and an
Explain panel that describes any step of the finished decode in plain language.

Handlers validate as the race's do (app/params.py), share the race's run board (one run per browser
session: a new Run or Stop in either tab cancels the run in flight) and turn expected failures into
gr.Error with a plain message.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from app.controls import CONTROL_NAMES, Inputs, build_inputs, wire_inputs
from app.drift import DriftRenderer, DriftUpdate, drift_snapshots
from app.explain import explain_step
from app.gpu import free_memory, on_gpu
from app.params import DEFAULT_COMPARED, RunParams, parse_params
from app.runs import closed_after, session_run
from app.sessions import StopFlag

STOPPED = '<div class="ec-banner">Stopped.</div>'
NO_RUN = "Run a diagnostic decode first; then pick a step here."
INTRO = """### Drift diagnostics
EntropyCache decodes the prompt with a probe on: before each step the probe compares the cache with what a
full forward of the current tokens would give (the *drift*, per layer), and measures how much each decoded
token's K/V still changes from one step to the next (its *volatility*, by steps since it was unmasked).
The probe's extra forward is not counted in any step's time."""


@dataclass(frozen=True)
class DriftRun:
    """What the Explain panel needs of a finished decode (kept in the session's gr.State)."""
    model: str  # the model's label: its tokenizer decodes the tokens
    tau: float
    events: tuple  # the StepEvents core yielded, as they came


class DriftHandlers:
    def __init__(self, race) -> None:
        """`race`: the race's app.ui.Handlers, whose registry, run board, throttle and warm-up this tab shares."""
        self.race = race
        self.gpu_snapshots = on_gpu(self.snapshots)  # decorated once, at build time, as ZeroGPU wants

    def snapshots(self, label: str, params: RunParams, prompt_ids: list[int], stop: StopFlag | None = None):
        """The decoding half of a run (on a GPU it holds the GPU): plain data out, no figures."""
        model, _ = self.race.load_warm(label)
        should_stop = stop.is_set if stop is not None else (lambda: False)
        try:
            yield from drift_snapshots(model, prompt_ids, params, self.race.throttle_s, should_stop)
        finally:
            free_memory()

    def run(
        self, prompt: str, model: str, tau: float, k: float, gen_len: float, block_len: float, steps: float,
        threshold: float, temperature: float, seed: float, request: gr.Request = None,
    ) -> Iterator[tuple]:
        """Validate, then stream the diagnostic decode: one output tuple per throttled update."""
        numbers = dict(zip(CONTROL_NAMES, (tau, k, gen_len, block_len, steps, threshold, temperature, seed)))
        try:  # the compared policy has no part here: only EntropyCache (tau, k) decodes
            params = parse_params(prompt, model, DEFAULT_COMPARED, models=self.race.registry.labels, **numbers)
        except ValueError as e:
            raise gr.Error(str(e), print_exception=False) from None
        yield from session_run(self.race.board, request, lambda flag: self._stream(params, flag),
                               (STOPPED, *(gr.skip(),) * 8), "Out of GPU memory: try a shorter gen length or prompt.")

    def _stream(self, params: RunParams, flag: StopFlag) -> Iterator[tuple]:
        registry = self.race.registry
        choice = registry.choice(params.model)
        if not registry.is_loaded(params.model):
            yield (f'<div class="ec-banner">Loading {choice.label} (the first run of a model takes a while)...</div>',
                   *(gr.skip(),) * 8)
        model, tokenizer = registry.get(params.model)
        renderer = DriftRenderer(model, tokenizer, params)
        yield drift_outputs(renderer.empty("Starting..."), start=True)
        run = self.gpu_snapshots if choice.device == "cuda" else self.snapshots
        with closed_after(run(params.model, params, renderer.prompt_ids, flag)) as snapshots:
            for snap in snapshots:
                update = renderer.update(snap)
                run_state = DriftRun(params.model, params.tau, update.events) if update.final_text is not None else None
                yield drift_outputs(update, run_state, tokenizer)

    def stop(self, request: gr.Request = None) -> str:
        self.race.board.cancel(getattr(request, "session_hash", None))
        return STOPPED

    def explain(self, step: float, run: DriftRun | None) -> str:
        """The Explain panel's text for step `step` of the session's last finished diagnostic decode."""
        if run is None or not run.events:
            return NO_RUN
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not float(step).is_integer():
            raise gr.Error(f"The step must be a whole number, got {step!r}.", print_exception=False)
        if not 0 <= step < len(run.events):
            raise gr.Error(f"The step must be between 0 and {len(run.events) - 1}, got {step:g}.",
                           print_exception=False)
        _, tokenizer = self.race.registry.get(run.model)
        return explain_step(run.events[int(step)], tokenizer, run.tau)


def drift_outputs(update: DriftUpdate, run: DriftRun | None = None, tokenizer=None, start: bool = False) -> tuple:
    """banner, text, scatter, heatmap, volatility, final text, run state, step slider, explanation."""
    head = (update.banner_html, update.text_html, update.scatter_fig, update.heatmap_fig, update.volatility_fig)
    if start:  # a new decode: the previous one's results and explanation go
        return (*head, "", None, gr.Slider(minimum=0, maximum=1, value=0, interactive=False), NO_RUN)
    if run is None:
        return (*head, gr.skip(), gr.skip(), gr.skip(), gr.skip())
    last = len(run.events) - 1
    return (*head, update.final_text, run, gr.Slider(minimum=0, maximum=max(last, 1), value=last, interactive=True),
            explain_step(run.events[last], tokenizer, run.tau))


def build_drift_tab(race, registry) -> tuple[DriftHandlers, Inputs]:
    """The tab's layout and events (call inside a gr.Tab); its handlers and input panel."""
    d = DriftHandlers(race)
    gr.Markdown(INTRO)
    ins: Inputs = build_inputs(registry, prefix="drift-", with_policy=False, run_label="Run diagnostics")
    banner = gr.HTML('<div class="ec-banner">Press Run diagnostics to start.</div>', elem_id="drift-banner")
    text = gr.HTML(elem_id="drift-text")
    with gr.Row(equal_height=False):
        scatter = gr.Plot(label="Drift vs entropy", show_label=False, elem_id="drift-scatter")
        volatility = gr.Plot(label="Volatility", show_label=False, elem_id="drift-volatility")
    heatmap = gr.Plot(label="Drift per layer and step", show_label=False, elem_id="drift-heatmap")
    final = gr.Textbox(label="Final text", lines=2, interactive=False, elem_id="drift-final")
    gr.Markdown("### Explain a step")
    step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False, elem_id="drift-step")
    explanation = gr.Markdown(NO_RUN, elem_id="drift-explain")
    state = gr.State(None)
    outs = [banner, text, scatter, heatmap, volatility, final, state, step, explanation]
    wire_inputs(ins, race, d.run, d.stop, outs, "drift", banner)
    # change, not release: typing a step into the slider's box counts too. Cheap, so not queued behind decodes.
    step.change(d.explain, [step, state], explanation, queue=False, api_visibility="private")
    return d, ins
