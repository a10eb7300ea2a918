"""The downloadable trace: every event of both decoders and the settings that produced them, as JSON,
with what a replay needs to draw them (the text of every token in them, the mask and end-of-text
ids, the layer count), so that a race recorded with any model replays anywhere (app/race/replay.py; a
trace is read back strictly by app/race/trace_reader.py).

The file is written as every download is (app/serving/downloads.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from app.race.decode import Lane
from app.serving.downloads import DOWNLOAD_DIR, write_download

TRACE_FORMAT = "entropycache-trace/1"
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
    params: dict, prompt_ids: list[int], lanes: tuple[Lane, Lane], policies: tuple[str, str], texts: tuple[str, str],
    speedup: float | None, model: TraceModel,
) -> dict:
    return {
        "format": TRACE_FORMAT,
        "model": {**asdict(model), "pieces": {str(i): text for i, text in model.pieces.items()}},
        "settings": params,
        "prompt_ids": prompt_ids,
        "speedup": speedup,
        "lanes": [
            {
                "side": side,
                "policy": policy,
                "text": text,
                "compute_s": lane.clock,
                "finish_rank": lane.finish_rank,
                "totals": lane.last.totals.to_dict() if lane.last else None,
                "events": [e.to_dict() for e in lane.events],
            }
            for side, lane, policy, text in zip(("left", "right"), lanes, policies, texts)
        ],
    }


def write_trace(data: dict, folder: Path = TRACE_DIR) -> Path:
    return write_download(json.dumps(data), "trace", ".json", folder)
