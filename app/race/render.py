"""The Race tab's renderer: a race's snapshots (app/race/decode.py) as HTML and figures, a lane of them
per decoder, the time panel and, at the end, the results and the written trace; a replayed trace is
drawn the same way.

Data flows one way: the decoder yields events, this module only reads them. No gradio here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import plotly.graph_objects as go

from app.controls.run import Run
from app.race.comparison import Comparison, LaneLabel, speedup
from app.race.decode import Lane, Snapshot
from app.race.parted import parted_html
from app.race.speed import banner_html, speed_html, summary_rows
from app.race.time_panel import time_html
from app.race.trace import TRACE_DIR, TraceModel, trace_dict, write_trace
from app.widgets.lane_plots import entropy_figure, rows_figure, step_axis
from app.widgets.text_view import TokenText, confidence_by_position, render_text
from core.loading import answer_text


@dataclass(frozen=True)
class LaneView:
    """A lane as drawn at one update: each part under the name of the lane's panel it fills (LANE_PARTS),
    and the tokens behind them."""

    speed: str  # HTML: its speed and steps
    text: str  # HTML: the response, token by token
    entropy: go.Figure  # the entropy trace
    rows: go.Figure  # the rows each step recomputed
    tokens: list[int]  # the response as the last step left it (mask id where masked)


# What a race and a replay draw in a lane at every update, by the name of the lane's panel (and of the
# HTTP API's output: 'left.rows'): LaneView's parts, declared there once.
LANE_PARTS = tuple(f.name for f in fields(LaneView) if f.name != "tokens")


@dataclass(frozen=True)
class Final:
    texts: tuple[str, ...]  # each lane's, left to right
    parted_html: str  # where the lanes' texts part (app/race/parted.py)
    summary: list[list]
    trace_path: Path


@dataclass(frozen=True)
class Update:
    banner_html: str
    time_html: str
    lanes: tuple[LaneView, ...]  # left to right, one per lane of the race
    sides: tuple[str, ...]  # each lane's side: left, (middle,) right
    final: Final | None = None  # only on the last update of a race that ran to the end


@dataclass(frozen=True)
class Layout:
    """What drawing a race takes besides its events, alike for a live race and a replayed trace."""

    text: TokenText
    gen_len: int
    max_steps: int  # the most steps a lane may take: the plots' step axis at the longest
    n_layers: int
    prompt_len: int
    labels: tuple[LaneLabel, ...]
    floor_s: float | None = None  # on a GPU, the weight-read floor (Snapshot.floor_s)
    changed: tuple[str, ...] = ()  # what the race decodes otherwise than it was sent (Run.changed)

    @property
    def length(self) -> int:
        return self.prompt_len + self.gen_len

    @property
    def comparison(self) -> Comparison:
        return Comparison(self.labels, self.prompt_len)

    @classmethod
    def for_run(cls, model, tokenizer, run: Run, prompt_len: int) -> Layout:
        cfg = model.config
        labels = tuple(LaneLabel.of(lane) for lane in run.lanes)
        return cls(TokenText(tokenizer, cfg.mask_token_id, cfg.eos_token_ids), run.config.gen_len,
                   run.max_steps, cfg.n_layers, prompt_len, labels, changed=run.changed)


class Renderer:
    """Snapshots -> Updates; a lane that has not moved since the last update is not redrawn. With
    `cursor` (a replay) the plots mark each lane's latest step."""

    def __init__(self, layout: Layout, cursor: bool = False) -> None:
        self.layout = layout
        self.cursor = cursor
        self._cache: dict[int, tuple[int, int, LaneView]] = {}

    def update(self, snap: Snapshot, message: str = "") -> Update:
        lay = self.layout
        floor_s = snap.floor_s if snap.floor_s is not None else lay.floor_s
        return Update(banner_html(snap.lanes, lay.comparison, message, snap.graphs_s, snap.graphs_failed,
                                  snap.prepared, lay.changed),
                      time_html(snap.lanes, lay.labels, lay.length, floor_s),
                      tuple(self._lane(i, lane) for i, lane in enumerate(snap.lanes)), self.sides)

    def empty(self, message: str) -> Update:
        """Before the first step: all masks, empty plots, a message in the banner."""
        lay = self.layout
        lanes = tuple(Lane(label.policy) for label in lay.labels)
        return Update(banner_html(lanes, lay.comparison, message=message, changed=lay.changed),
                      time_html(lanes, lay.labels, lay.length, lay.floor_s),
                      tuple(self._lane(i, lane) for i, lane in enumerate(lanes)), self.sides)

    @property
    def sides(self) -> tuple[str, ...]:
        return tuple(label.side for label in self.layout.labels)

    def _lane(self, i: int, lane: Lane) -> LaneView:
        key = (len(lane.events), lane.finish_rank or 0)
        cached = self._cache.get(i)
        if cached and cached[:2] == key:
            return cached[2]
        lay = self.layout
        label = lay.labels[i]
        cursor = lane.last.step if self.cursor and lane.last else None
        span = step_axis(len(lane.events), lay.max_steps)
        view = LaneView(
            speed=speed_html(lane, label),
            text=render_text(lane.last, lay.text, lay.gen_len, confidence_by_position(lane.events)),
            entropy=entropy_figure(lane.events, label.tau, span, cursor, label.cached),
            rows=rows_figure(lane.events, lay.n_layers, span, lay.length, lay.prompt_len, cursor),
            tokens=list(lane.last.tokens) if lane.last else [],
        )
        self._cache[i] = (*key, view)
        return view


class RaceRenderer(Renderer):
    """A live race's renderer: its last update also carries the results and the written trace."""

    def __init__(self, model, tokenizer, run: Run, trace_dir: Path = TRACE_DIR) -> None:
        self.run = run
        self.tokenizer = tokenizer
        self.prompt_ids = run.ids(tokenizer)  # every decoder gets these very ids
        super().__init__(Layout.for_run(model, tokenizer, run, len(self.prompt_ids)))
        self.trace_dir = trace_dir

    def update(self, snap: Snapshot, message: str = "") -> Update:
        update = super().update(snap, message)
        return replace(update, final=self.final(snap)) if snap.finished else update

    def final(self, snap: Snapshot) -> Final:
        lay = self.layout
        texts = tuple(answer_text(self.tokenizer, lane.last) for lane in snap.lanes)
        data = trace_dict(self.run.settings, self.prompt_ids, snap.lanes, lay.labels, texts,
                          speedup(snap.lanes[0], snap.lanes[-1], finished=True), TraceModel.of(lay, *snap.lanes),
                          snap.floor_s)
        return Final(texts, parted_html(snap.lanes, lay.labels, lay.text), summary_rows(snap.lanes, lay.labels),
                     write_trace(data, self.trace_dir))
