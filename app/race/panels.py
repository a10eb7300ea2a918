"""The Race tab's panels: the banner, a lane per side (speed, text, the replay's story, entropy trace,
recomputed rows; the middle lane shown only in a race that has one), the time panel and the results,
and how a rendered Update (app/race/render.py) fills them. A race and its replay draw into the same
panels.

Every output has a name (OUTPUT_NAMES, in the HTTP API's order), declared once: the handlers' outputs
are looked up by it (RacePanels.named), and a client reads a race's outputs by it (app/client.py), not
by position.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd
from gradio.blocks import Block

from app.race.comparison import SIDE_TITLES
from app.race.render import LANE_PARTS, Final, LaneView, Update
from app.race.speed import SUMMARY_HEADERS, SUMMARY_WIDTHS
from app.serving.runner import Outputs
from app.widgets.banner import banner
from app.widgets.lane_plots import entropy_placeholder, rows_placeholder
from app.widgets.text_view import LEGEND

SIDES = tuple(SIDE_TITLES)  # left, middle, right
LANES = tuple(f"{side}.{part}" for side in SIDES for part in LANE_PARTS)
# What an API client gets, by name, in order. The middle lane's column is among a handler's outputs (it
# is shown or hidden) but, a layout block, not among the HTTP API's.
# Every update of a race or a replay (RacePanels.drawn): banner, time panel, each side's lane, the middle
# lane's final text (shown or hidden with its lane).
DRAWN_NAMES = ("status", "time", *LANES, "middle.final")
# `/run` (RacePanels.outputs): banner, time panel, each side's lane, where the texts part, each side's final
# text, summary, trace.
OUTPUT_NAMES = ("status", "time", *LANES, "parted", *(f"{side}.final" for side in SIDES), "summary", "trace")
# A lane fits one 1366x768 screen (a projector's): its text scrolls in a box of its own, the texts' legend is
# said once above the lanes, and the replay's story takes no room until a replay writes one.
CSS = """
.ec-lane-text .ec-text { max-height: 150px; overflow-y: auto; font-size: 13px; line-height: 1.75; }
.ec-lane-text .ec-legend { display: none; }
#lanes-legend .ec-legend { font-size: 12px; margin-bottom: 0; }
.ec-lane-story:not(:has(p, li)) { display: none; }
"""


@dataclass(frozen=True)
class LanePanels:
    """A lane's panels: one per part it draws at every update (LANE_PARTS, named as LaneView's), the
    replay's story and the final text."""

    speed: gr.HTML
    text: gr.HTML
    story: gr.Markdown  # the replay's story of the step on screen, under the text
    entropy: gr.Plot
    rows: gr.Plot
    final: gr.Textbox  # the lane's final text, under "Result"

    def show(self, lane: LaneView) -> Outputs:
        return {getattr(self, part): getattr(lane, part) for part in LANE_PARTS}


@dataclass(frozen=True)
class RacePanels:
    status: gr.HTML
    time: gr.HTML  # where each lane's time goes (app/race/time_panel.py)
    lanes: dict[str, LanePanels]  # by side: left, middle, right
    middle: gr.Column  # the middle lane, shown only in a race that has one
    parted: gr.HTML  # where the finished lanes' texts part (app/race/parted.py)
    summary: gr.Dataframe
    trace: gr.File  # the whole trace, to download (and to replay)

    def named(self, name: str) -> Block:
        """The output called `name` (OUTPUT_NAMES, DRAWN_NAMES): 'status', or a lane's part, 'left.speed'."""
        side, _, part = name.rpartition(".")
        return getattr(self.lanes[side], part) if side else getattr(self, name)

    def outputs(self) -> list[Block]:
        """What a race updates: OUTPUT_NAMES in the HTTP API's order, and the middle lane's column (a
        layout block, no output of the HTTP API)."""
        return [*map(self.named, OUTPUT_NAMES), self.middle]

    def drawn(self) -> list[Block]:
        """What every update of a race or a replay may change: DRAWN_NAMES, in the HTTP API's order, and
        whether the middle lane shows."""
        return [*map(self.named, DRAWN_NAMES), self.middle]

    def show(self, update: Update) -> Outputs:
        """The banner, the time panel and the lanes the race has, and the results once the race has them."""
        out = {self.status: update.banner_html, self.time: update.time_html} | self.shown(update.sides)
        for side, lane in zip(update.sides, update.lanes):
            out |= self.lanes[side].show(lane)
        return out | self.results(update.sides, update.final) if update.final is not None else out

    def shown(self, sides: tuple[str, ...]) -> Outputs:
        """The middle lane and its final text, visible in a race that has one."""
        middle = "middle" in sides
        return {self.middle: gr.Column(visible=middle), self.lanes["middle"].final: gr.Textbox(visible=middle)}

    def results(self, sides: tuple[str, ...], final: Final) -> Outputs:
        texts = {self.lanes[side].final: text for side, text in zip(sides, final.texts)}
        return texts | {self.parted: final.parted_html, self.trace: str(final.trace_path),
                        self.summary: pd.DataFrame(final.summary, columns=SUMMARY_HEADERS)}

    def cleared(self) -> Outputs:
        """No results: a new race's go at once."""
        return {**{self.lanes[side].final: "" for side in SIDES}, self.parted: "", self.summary: None, self.trace: None}


def build_race_panels() -> RacePanels:
    """The lanes side by side under the banner, so that both come into view together when a race starts;
    then where the time goes and the results (call inside the Race tab). Each figure says, until the
    race draws it, what it will show."""
    status = gr.HTML(banner("Press Run (or a preset) to start the race."), elem_id="banner")
    columns, parts = {}, {}
    gr.HTML(LEGEND, elem_id="lanes-legend")
    with gr.Row(equal_height=False):
        for side in SIDES:
            with gr.Column(elem_id=f"lane-{side}", visible=side != "middle") as columns[side]:
                parts[side] = dict(
                    speed=gr.HTML(elem_id=f"speed-{side}"),
                    text=gr.HTML(label=f"{SIDE_TITLES[side]}: text", elem_id=f"text-{side}",
                                 elem_classes=["ec-lane-text"]),
                    story=gr.Markdown(elem_id=f"story-{side}", elem_classes=["ec-lane-story"]),
                    entropy=gr.Plot(entropy_placeholder(), label="Entropy trace", show_label=False,
                                    elem_id=f"entropy-{side}"),
                    rows=gr.Plot(rows_placeholder(), label="Recomputed rows", show_label=False,
                                 elem_id=f"rows-{side}"),
                )
    time = gr.HTML(elem_id="time-panel")
    gr.Markdown("### Result")
    parted = gr.HTML(elem_id="parted")
    with gr.Row():
        finals = {side: gr.Textbox(label=f"{SIDE_TITLES[side]}: final text", lines=3, interactive=False,
                                   visible=side != "middle", elem_id=f"final-{side}") for side in SIDES}
    summary = gr.Dataframe(headers=SUMMARY_HEADERS, label="Summary", interactive=False, wrap=True,
                           column_widths=SUMMARY_WIDTHS, elem_id="summary")
    trace = gr.File(label="Whole trace (JSON)", interactive=False, height=90, elem_id="trace")
    lanes = {side: LanePanels(**parts[side], final=finals[side]) for side in SIDES}
    return RacePanels(status, time, lanes, columns["middle"], parted, summary, trace)
