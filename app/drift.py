"""The diagnostic decode behind the Drift tab: the picked policy with core's Probe hook, streamed and rendered.

`drift_snapshots` is the only part that touches the model (on a GPU it runs inside the GPU
allocation) and yields plain data: the events so far. `DriftRenderer` turns them into the banner, the
response text and three figures, using core.diagnostics for every number. Data flows one way: the
decoder yields events, this module only reads them. No gradio here.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import plotly.graph_objects as go

from app.banner import banner
from app.drift_plots import drift_heatmap, drift_scatter, volatility_figure
from app.params import OURS, RunParams
from app.race import DEFAULT_THROTTLE_S, Throttle
from app.text_view import TokenText, confidence_by_position, render_text
from core.decoder import decode
from core.diagnostics import Probe, drift_vs_entropy, volatility_curve
from core.events import StepEvent
from core.loading import answer_text, chat_prompt_ids


@dataclass(frozen=True)
class DriftSnapshot:
    events: tuple[StepEvent, ...]  # every event so far (a snapshot never changes after it is yielded)
    finished: bool  # the decode ran to its last step


@dataclass(frozen=True)
class DriftUpdate:
    banner_html: str
    text_html: str
    scatter_fig: go.Figure
    heatmap_fig: go.Figure
    volatility_fig: go.Figure
    stats: dict  # core.diagnostics.drift_vs_entropy of the events so far
    curve: dict[int, float]  # core.diagnostics.volatility_curve of the events so far
    events: tuple[StepEvent, ...]
    final_text: str | None = None  # only on the last update of a decode that ran to the end


def drift_snapshots(
    model, prompt_ids: list[int], params: RunParams, throttle_s: float = DEFAULT_THROTTLE_S,
    should_stop: Callable[[], bool] = lambda: False, wall_clock: Callable[[], float] = time.perf_counter,
) -> Iterator[DriftSnapshot]:
    """The picked policy (`params.picked_policy()`) with a Probe; a snapshot after each `throttle_s` of
    stepping (app.race.Throttle) and at the end.

    `should_stop` is polled before each step: when it turns true the decode ends without a further snapshot."""
    decoder = decode(model, prompt_ids, params.picked_policy(), params.decode_config(), before_step=Probe(model))
    events: list[StepEvent] = []
    throttle = Throttle(throttle_s, wall_clock)
    try:
        while not should_stop():
            event = next(decoder, None)
            if event is None:
                if events and not events[-1].done:  # a decoder that ends without a done event still ends
                    yield DriftSnapshot(tuple(events), True)
                return
            events.append(event)
            if event.done or throttle.due():
                throttle.handing_over()
                yield DriftSnapshot(tuple(events), bool(event.done))
                throttle.rendered()
            if event.done:
                return
    finally:
        decoder.close()


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.3f}"


class DriftRenderer:
    """Snapshots of one diagnostic decode -> DriftUpdates."""

    def __init__(self, model, tokenizer, params: RunParams) -> None:
        cfg = model.config
        self.params = params
        self.tokenizer = tokenizer
        self.prompt_ids = chat_prompt_ids(tokenizer, params.prompt)  # the ids the decode gets
        self.max_steps = params.gen_len if params.threshold else (params.steps or params.gen_len)
        self.n_layers = cfg.n_layers
        self.text = TokenText(tokenizer, cfg.mask_token_id, cfg.eos_token_ids)
        self.policy = params.picked_policy().describe()
        self.tau = params.tau if params.policy == OURS else None  # a threshold only ours has

    def empty(self, message: str) -> DriftUpdate:
        return self._render((), message, finished=False)

    def update(self, snap: DriftSnapshot) -> DriftUpdate:
        return self._render(snap.events, "", snap.finished)

    def _render(self, events: tuple[StepEvent, ...], message: str, finished: bool) -> DriftUpdate:
        stats = drift_vs_entropy(list(events))
        curve = volatility_curve(list(events))
        return DriftUpdate(
            banner_html=self._banner(events, stats, message, finished),
            text_html=render_text(events[-1] if events else None, self.text, self.params.gen_len,
                                  confidence_by_position(events)),
            scatter_fig=drift_scatter(stats, self.tau),
            heatmap_fig=drift_heatmap(list(events), self.n_layers, self.max_steps),
            volatility_fig=volatility_figure(curve),
            stats=stats,
            curve=curve,
            events=events,
            final_text=answer_text(self.tokenizer, events[-1]) if finished and events else None,
        )

    def _banner(self, events, stats: dict, message: str, finished: bool) -> str:
        if message:
            body = message
        else:
            full = sum(e.full for e in events)
            state = "Done" if finished else "Decoding"
            body = (f"{state} ({html.escape(self.policy)}, probe on): step {len(events)} of at most {self.max_steps}, "
                    f"{full} full. Entropy vs drift over {len(stats['entropy'])} steps: "
                    f"1 - cos Pearson {_fmt(stats['pearson_cos'])}, Spearman {_fmt(stats['spearman_cos'])}; "
                    f"relative L2 Pearson {_fmt(stats['pearson_l2'])}, Spearman {_fmt(stats['spearman_l2'])}.")
        return banner(body)

