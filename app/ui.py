"""The Gradio app: three tabs (the Race, here; Drift diagnostics, app/drift_tab.py; the tau x k Sweep,
app/sweep_tab.py), and the race's handlers, which validate input and stream a race into the panels.

Handlers turn every expected failure (bad input, a prompt too long for the model, out of GPU memory)
into gr.Error with a plain message; anything unexpected reaches the visitor as Gradio's generic
error, never as a stack trace (show_error stays off).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import gradio as gr
import pandas as pd

from app.controls import CONTROL_NAMES, build_inputs, wire_inputs
from app.drift_tab import build_drift_tab
from app.gpu import default_concurrency, free_memory, on_gpu
from app.models import ModelRegistry
from app.params import RunParams, parse_params
from app.race import Snapshot
from app.runs import closed_after, session_run
from app.sessions import RunBoard, StopFlag
from app.speed import CSS as SPEED_CSS
from app.speed import SUMMARY_HEADERS
from app.stream import DEFAULT_THROTTLE_S, SIDES, Renderer, Update, race_snapshots, warm_up
from app.sweep_tab import SWEEP_JS, build_sweep_tab
from app.text_view import CSS as TEXT_CSS

CSS = TEXT_CSS + SPEED_CSS
STOPPED = '<div class="ec-banner">Stopped.</div>'
INTRO = """# EntropyCache: a decode race
Two decoders unmask the same prompt with the same seed. **Left:** the policy you compare against
(default: no cache, every step recomputes every row). **Right:** EntropyCache, which recomputes the
whole cache only after a step that decoded an uncertain token (max entropy above *tau*).
They advance on one shared clock of measured compute time, so the faster one finishes first."""


class Handlers:
    def __init__(self, registry: ModelRegistry, board: RunBoard, throttle_s: float) -> None:
        self.registry = registry
        self.board = board
        self.throttle_s = throttle_s
        self._warm: weakref.WeakSet = weakref.WeakSet()  # models that have run once in this process
        self.gpu_snapshots = on_gpu(self.snapshots)  # decorated once, at build time, as ZeroGPU wants

    def snapshots(
        self, label: str, params: RunParams, prompt_ids: list[int], stop: StopFlag | None = None
    ) -> Iterator[Snapshot]:
        """The decoding half of a run (on a GPU it holds the GPU): plain data out, no figures.

        `stop` is the run's own flag, polled between steps. On ZeroGPU spaces.GPU pickles the arguments
        into a forked worker process; the flag is file-backed (app/sessions.py), so the worker's copy
        sees a Stop or a new Run set in the server and its race ends within one step.
        """
        model, _ = self.load_warm(label)
        should_stop = stop.is_set if stop is not None else (lambda: False)
        try:
            yield from race_snapshots(model, prompt_ids, params, self.throttle_s, should_stop)
        finally:
            free_memory()

    def load_warm(self, label: str) -> tuple[object, object]:
        """(model, tokenizer), warmed up once per process (see app.stream.warm_up)."""
        model, tokenizer = self.registry.get(label)
        if model not in self._warm:
            warm_up(model, tokenizer)
            self._warm.add(model)
        return model, tokenizer

    def run(
        self, prompt: str, model: str, policy: str, tau: float, k: float, gen_len: float, block_len: float,
        steps: float, threshold: float, temperature: float, seed: float, request: gr.Request = None,
    ) -> Iterator[tuple]:
        """Validate, then stream the race: one output tuple per throttled snapshot, the last one with results."""
        numbers = dict(zip(CONTROL_NAMES, (tau, k, gen_len, block_len, steps, threshold, temperature, seed)))
        try:
            params = parse_params(prompt, model, policy, models=self.registry.labels, **numbers)
        except ValueError as e:
            raise gr.Error(str(e), print_exception=False) from None
        stopped = banner_only("Stopped.", clear_final=False)
        yield from session_run(self.board, request, lambda flag: self._stream(params, flag), stopped,
                               "Out of GPU memory: try a shorter gen length or prompt.")

    def _stream(self, params: RunParams, flag: StopFlag) -> Iterator[tuple]:
        choice = self.registry.choice(params.model)
        if not self.registry.is_loaded(params.model):
            yield banner_only(f"Loading {choice.label} (the first run of a model takes a while)...")
        model, tokenizer = self.registry.get(params.model)
        renderer = Renderer(model, tokenizer, params)
        yield outputs(renderer.empty("Starting..."), clear_final=True)
        run = self.gpu_snapshots if choice.device == "cuda" else self.snapshots
        with closed_after(run(params.model, params, renderer.prompt_ids, flag)) as snapshots:  # freed if cancelled
            for snap in snapshots:
                yield outputs(renderer.update(snap))  # rendering happens here, between steps, off the clocks

    def stop(self, request: gr.Request = None) -> str:
        # Gradio's own cancel (cancels=[run_event]) may already have closed the run; the flag covers a
        # run caught mid-step, which Gradio cannot close, and a ZeroGPU worker, which closing does not stop.
        self.board.cancel(getattr(request, "session_hash", None))
        return STOPPED

    def cancel_previous(self, request: gr.Request = None) -> None:
        """Runs before a new Run is queued, so a run in flight stops even while the new one waits for a slot."""
        self.board.cancel(getattr(request, "session_hash", None), reason="replaced")

    def on_model(self, label: str) -> tuple:
        c = self.registry.choice(label)
        return gr.Dataset(samples=[[e] for e in c.examples]), c.examples[0], c.gen_len, c.block_len

    def pick_example(self, index: int | None, label: str) -> Any:
        examples = self.registry.choice(label).examples
        return examples[index] if index is not None and 0 <= index < len(examples) else gr.skip()


def banner_only(message: str, clear_final: bool = True) -> tuple:
    """Only the banner changes (and the previous run's results are cleared, if asked)."""
    finals = ("", "", None, None) if clear_final else (gr.skip(),) * 4
    return (f'<div class="ec-banner">{message}</div>', *(gr.skip(),) * 8, *finals)


def outputs(update: Update, clear_final: bool = False) -> tuple:
    """An Update as the tuple of component values: banner, 2 x 4 lane parts, 2 final texts, summary, trace."""
    lanes = [x for v in update.lanes for x in (v.speed_html, v.text_html, v.entropy_fig, v.rows_fig)]
    if update.final is not None:
        f = update.final
        finals = (*f.texts, pd.DataFrame(f.summary, columns=SUMMARY_HEADERS), str(f.trace_path))
    elif clear_final:
        finals = ("", "", None, None)
    else:
        finals = (gr.skip(),) * 4
    return (update.banner_html, *lanes, *finals)


def _race_panels() -> tuple[gr.HTML, list[gr.components.Component]]:
    """The banner, then per side: speed panel, text, entropy trace, recomputed-rows heatmaps."""
    banner = gr.HTML('<div class="ec-banner">Press Run to start the race.</div>', elem_id="banner")
    panels = []
    with gr.Row(equal_height=False):
        for i, side in enumerate(SIDES):
            with gr.Column(elem_id=f"lane-{i}"):
                panels += [
                    gr.HTML(elem_id=f"speed-{i}"),
                    gr.HTML(label=f"{side}: text", elem_id=f"text-{i}"),
                    gr.Plot(label="Entropy trace", show_label=False, elem_id=f"entropy-{i}"),
                    gr.Plot(label="Recomputed rows", show_label=False, elem_id=f"rows-{i}"),
                ]
    return banner, panels


def _results() -> list[gr.components.Component]:
    """Final texts side by side, the summary table, the trace download."""
    gr.Markdown("### Result")
    with gr.Row():
        finals = [gr.Textbox(label=f"{side}: final text", lines=3, interactive=False) for side in SIDES]
    summary = gr.Dataframe(headers=SUMMARY_HEADERS, label="Summary", interactive=False)
    trace = gr.File(label="Whole trace (JSON)", interactive=False, height=90, elem_id="trace")
    return [*finals, summary, trace]


def build_demo(
    registry: ModelRegistry, *, throttle_s: float = DEFAULT_THROTTLE_S, concurrency: int | None = None
) -> gr.Blocks:
    """The app, queued with `concurrency` races at once (default: app.gpu.default_concurrency())."""
    h = Handlers(registry, RunBoard(), throttle_s)
    with gr.Blocks(title="EntropyCache decode race") as demo:
        with gr.Tabs():
            with gr.Tab("Race", id="race"):
                gr.Markdown(INTRO)
                ins = build_inputs(registry)
                banner, panels = _race_panels()
                outs = [banner, *panels, *_results()]  # the order of `outputs(update)`
                wire_inputs(ins, h, h.run, h.stop, outs, "run", banner)
            with gr.Tab("Drift", id="drift"):
                _, drift_ins = build_drift_tab(h, registry)
            with gr.Tab("Sweep", id="sweep"):
                loads = [ins.controls["tau"], ins.controls["k"], drift_ins.controls["tau"], drift_ins.controls["k"]]
                build_sweep_tab(h, registry, loads)
    demo.queue(default_concurrency_limit=concurrency or default_concurrency())
    return demo


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, share: bool = False) -> str:
    """Start serving in the background; returns the local URL. (CSS and the page's script go here:
    Gradio 6 takes them at launch.)"""
    demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True, css=CSS, js=SWEEP_JS,
                show_error=False, quiet=True)
    return demo.local_url
