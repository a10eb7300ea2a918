"""The Race tab's renderer: a race's snapshots (app/race/decode.py) as HTML and figures, two lanes of
them and, at the end, the results and the written trace; a replayed trace is drawn the same way.

Data flows one way: the decoder yields events, this module only reads them. No gradio here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import plotly.graph_objects as go

from app.controls.run import Run
from app.race.decode import Lane, Snapshot
from app.race.speed import banner_html, speed_html, speedup, summary_rows
from app.race.trace import TRACE_DIR, TraceModel, trace_dict, write_trace
from app.widgets.lane_plots import entropy_figure, rows_figure
from app.widgets.text_view import TokenText, confidence_by_position, render_text
from core.loading import answer_text, chat_prompt_ids

SIDES = ("Left: compared", "Right: EntropyCache")


@dataclass(frozen=True)
class LaneView:
    speed_html: str
    text_html: str
    entropy_fig: go.Figure
    rows_fig: go.Figure
    tokens: list[int]  # the response as the last step left it (mask id where masked)


@dataclass(frozen=True)
class Final:
    texts: tuple[str, str]
    summary: list[list]
    trace_path: Path


@dataclass(frozen=True)
class Update:
    banner_html: str
    lanes: tuple[LaneView, LaneView]
    final: Final | None = None  # only on the last update of a race that ran to the end


@dataclass(frozen=True)
class Layout:
    """What drawing a race takes besides its events, alike for a live race and a replayed trace."""

    text: TokenText
    gen_len: int
    tau: float
    max_steps: int  # the plots' step axis
    n_layers: int
    prompt_len: int
    policies: tuple[str, str]

    @property
    def length(self) -> int:
        return self.prompt_len + self.gen_len

    @classmethod
    def for_run(cls, model, tokenizer, run: Run, prompt_len: int) -> Layout:
        cfg = model.config
        return cls(TokenText(tokenizer, cfg.mask_token_id, cfg.eos_token_ids), run.config.gen_len,
                   run.settings["tau"], run.max_steps, cfg.n_layers, prompt_len,
                   tuple(policy.describe() for policy in run.policies))


class Renderer:
    """Snapshots -> Updates; a lane that has not moved since the last update is not redrawn. With
    `cursor` (a replay) the plots mark each lane's latest step."""

    def __init__(self, layout: Layout, cursor: bool = False) -> None:
        self.layout = layout
        self.cursor = cursor
        self._cache: dict[int, tuple[int, int, LaneView]] = {}

    def update(self, snap: Snapshot, message: str = "") -> Update:
        base, ours = snap.lanes
        return Update(banner_html(base, ours, message, snap.graphs_s, snap.graphs_failed),
                      (self._lane(0, base), self._lane(1, ours)))

    def empty(self, message: str) -> Update:
        """Before the first step: all masks, empty plots, a message in the banner."""
        lanes = (Lane(self.layout.policies[0]), Lane(self.layout.policies[1]))
        return Update(banner_html(*lanes, message=message), (self._lane(0, lanes[0]), self._lane(1, lanes[1])))

    def _lane(self, i: int, lane: Lane) -> LaneView:
        key = (len(lane.events), lane.finish_rank or 0)
        cached = self._cache.get(i)
        if cached and cached[:2] == key:
            return cached[2]
        lay = self.layout
        cursor = lane.last.step if self.cursor and lane.last else None
        view = LaneView(
            speed_html=speed_html(lane, SIDES[i], lay.policies[i]),
            text_html=render_text(lane.last, lay.text, lay.gen_len, confidence_by_position(lane.events)),
            entropy_fig=entropy_figure(lane.events, lay.tau, lay.max_steps, f"Entropy: {lay.policies[i]}", cursor),
            rows_fig=rows_figure(lane.events, lay.n_layers, lay.max_steps, lay.length, lay.prompt_len, cursor),
            tokens=list(lane.last.tokens) if lane.last else [],
        )
        self._cache[i] = (*key, view)
        return view


class RaceRenderer(Renderer):
    """A live race's renderer: its last update also carries the results and the written trace."""

    def __init__(self, model, tokenizer, run: Run, trace_dir: Path = TRACE_DIR) -> None:
        self.run = run
        self.tokenizer = tokenizer
        self.prompt_ids = chat_prompt_ids(tokenizer, run.prompt)  # both decoders get these very ids
        super().__init__(Layout.for_run(model, tokenizer, run, len(self.prompt_ids)))
        self.trace_dir = trace_dir

    def update(self, snap: Snapshot, message: str = "") -> Update:
        update = super().update(snap, message)
        return replace(update, final=self.final(snap)) if snap.finished else update

    def final(self, snap: Snapshot) -> Final:
        base, ours = snap.lanes
        lay = self.layout
        texts = tuple(answer_text(self.tokenizer, la.last) for la in (base, ours))
        data = trace_dict(self.run.settings, self.prompt_ids, (base, ours), lay.policies, texts,
                          speedup(base, ours), TraceModel.of(lay, base, ours))
        return Final(texts, summary_rows(base, ours, lay.policies), write_trace(data, self.trace_dir))
