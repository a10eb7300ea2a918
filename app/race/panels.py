"""The Race tab's panels: the banner, two lanes (speed, text, the replay's story, entropy trace,
recomputed rows) and the results, and how a rendered Update (app/race/render.py) fills them. A race
and its replay draw into the same panels.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd
from gradio.blocks import Block

from app.race.render import SIDES, Final, LaneView, Update
from app.race.speed import SUMMARY_HEADERS
from app.serving.runner import Outputs
from app.widgets.banner import banner


@dataclass(frozen=True)
class LanePanels:
    speed: gr.HTML
    text: gr.HTML
    story: gr.Markdown  # the replay's story of the step on screen, under the text
    entropy: gr.Plot
    rows: gr.Plot

    def drawn(self) -> list[Block]:
        """What a race and a replay draw at every update, in the HTTP API's order."""
        return [self.speed, self.text, self.entropy, self.rows]

    def show(self, lane: LaneView) -> Outputs:
        return {self.speed: lane.speed_html, self.text: lane.text_html, self.entropy: lane.entropy_fig,
                self.rows: lane.rows_fig}


@dataclass(frozen=True)
class RacePanels:
    status: gr.HTML
    lanes: tuple[LanePanels, LanePanels]
    finals: tuple[gr.Textbox, gr.Textbox]  # each lane's final text
    summary: gr.Dataframe
    trace: gr.File  # the whole trace, to download (and to replay)

    def outputs(self) -> list[Block]:
        """What a race updates, in the HTTP API's order (`/run`): banner, each lane's four parts, the
        final texts, summary, trace."""
        return [self.status, *(c for lane in self.lanes for c in lane.drawn()), *self.finals, self.summary,
                self.trace]

    def show(self, update: Update) -> Outputs:
        """The banner and both lanes, and the results once the race has them."""
        out = {self.status: update.banner_html}
        for panels, lane in zip(self.lanes, update.lanes):
            out |= panels.show(lane)
        return out | self.results(update.final) if update.final is not None else out

    def results(self, final: Final) -> Outputs:
        texts = dict(zip(self.finals, final.texts))
        return texts | {self.summary: pd.DataFrame(final.summary, columns=SUMMARY_HEADERS),
                        self.trace: str(final.trace_path)}

    def cleared(self) -> Outputs:
        """No results: a new race's go at once."""
        return {self.finals[0]: "", self.finals[1]: "", self.summary: None, self.trace: None}


def build_race_panels() -> RacePanels:
    """The lanes side by side under the banner, then the results (call inside the Race tab)."""
    status = gr.HTML(banner("Press Run to start the race."), elem_id="banner")
    lanes = []
    with gr.Row(equal_height=False):
        for i, side in enumerate(SIDES):
            with gr.Column(elem_id=f"lane-{i}"):
                lanes.append(LanePanels(
                    speed=gr.HTML(elem_id=f"speed-{i}"),
                    text=gr.HTML(label=f"{side}: text", elem_id=f"text-{i}"),
                    story=gr.Markdown(elem_id=f"story-{i}"),
                    entropy=gr.Plot(label="Entropy trace", show_label=False, elem_id=f"entropy-{i}"),
                    rows=gr.Plot(label="Recomputed rows", show_label=False, elem_id=f"rows-{i}"),
                ))
    gr.Markdown("### Result")
    with gr.Row():
        finals = tuple(gr.Textbox(label=f"{side}: final text", lines=3, interactive=False) for side in SIDES)
    summary = gr.Dataframe(headers=SUMMARY_HEADERS, label="Summary", interactive=False)
    trace = gr.File(label="Whole trace (JSON)", interactive=False, height=90, elem_id="trace")
    return RacePanels(status, tuple(lanes), finals, summary, trace)
