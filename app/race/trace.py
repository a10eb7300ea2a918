"""The downloadable trace: every event of every lane and the settings that produced them, as JSON,
with what a replay needs to draw them (the text of every token in them, the mask and end-of-text
ids, the layer count), so that a race recorded with any model replays anywhere (app/race/replay.py; a
trace is read back strictly by app/race/trace_reader.py).

The file is written as every download is (app/serving/downloads.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from app.race.comparison import LaneLabel
from app.race.decode import Lane
from app.serving.downloads import DOWNLOAD_DIR, write_download

TRACE_FORMAT = "entropycache-trace/2"  # /2: per-lane decode settings, a middle lane, pass times
# A trace of the first format (two lanes at the run's settings, no pass times) still loads.
OLD_FORMATS = ("entropycache-trace/1",)
TRACE_DIR = DOWNLOAD_DIR


@dataclass(frozen=True)
class TraceModel:
    """The model facts a replay draws with: token text by id, the mask and end-of-text ids, layers."""

    mask_id: int
    eos_ids: list[int]
    n_layers: int
    sep: str  # what joins two tokens' text (app/widgets/text_view.py)
    pieces: dict[int, str]  # the text of every token in the trace's events

    @classmethod
    def of(cls, layout, *lanes: Lane) -> TraceModel:
        text = layout.text
        ids = {i for lane in lanes for e in lane.events for i in (*e.tokens, *e.unmasked_tokens)}
        ids.discard(text.mask_id)
        return cls(text.mask_id, sorted(text.eos_ids), layout.n_layers, text.sep, text.pieces(sorted(ids)))


def trace_dict(
    params: dict, prompt_ids: list[int], lanes: Sequence[Lane], labels: Sequence[LaneLabel], texts: Sequence[str],
    speedup: float | None, model: TraceModel, floor_s: float | None = None,
) -> dict:
    """The trace of a race: its settings, and per lane its side, policy, own decode settings, text,
    clock and events; `floor_s` the device's weight-read floor (None: on the CPU)."""
    return {
        "format": TRACE_FORMAT,
        "model": {**asdict(model), "pieces": {str(i): text for i, text in model.pieces.items()}},
        "settings": params,
        "prompt_ids": prompt_ids,
        "speedup": speedup,
        "weight_floor_s": floor_s,
        "lanes": [
            {
                "side": label.side,
                "policy": label.policy,
                "decoding": label.decoding,
                "text": text,
                "compute_s": lane.clock,
                "finish_rank": lane.finish_rank,
                "totals": lane.last.totals.to_dict() if lane.last else None,
                "events": [e.to_dict() for e in lane.events],
            }
            for lane, label, text in zip(lanes, labels, texts)
        ],
    }


def write_trace(data: dict, folder: Path = TRACE_DIR) -> Path:
    return write_download(json.dumps(data), "trace", ".json", folder)
