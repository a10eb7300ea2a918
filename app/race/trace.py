"""The downloadable trace: every event of both decoders and the settings that produced them, as JSON,
with what a replay needs to draw them (the text of every token in them, the mask and end-of-text
ids, the layer count), so that a race recorded with any model replays anywhere (app/race/replay.py; a
trace is read back strictly by app/race/trace_reader.py).

Files go to one folder under the system temp dir (where Gradio may serve them from) with a random
name. Whenever a new one is written, files older than a day go, and then the oldest ones until at most
MAX_FILES - 1 files and MAX_BYTES remain: a busy server (a long run writes ~5 MB) cannot fill the disk
within the day.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from app.race.decode import Lane

TRACE_FORMAT = "entropycache-trace/1"

TRACE_DIR = Path(tempfile.gettempdir()) / "entropycache-traces"
MAX_AGE_S = 24 * 3600
MAX_FILES = 200
MAX_BYTES = 200 * 2**20


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
    folder.mkdir(parents=True, exist_ok=True)
    _prune(folder)
    path = folder / f"entropycache-trace-{uuid.uuid4().hex[:12]}.json"
    path.write_text(json.dumps(data))
    return path


def _prune(folder: Path) -> None:
    """Keep only files younger than MAX_AGE_S, and of those the newest within MAX_FILES - 1 and MAX_BYTES."""
    cutoff = time.time() - MAX_AGE_S
    kept, total = 0, 0
    for mtime, size, path in sorted(_listing(folder), reverse=True):  # newest first
        kept, total = kept + 1, total + size
        if mtime < cutoff or kept >= MAX_FILES or total > MAX_BYTES:  # >=: leave room for the new file
            _remove(path)


def _listing(folder: Path) -> list[tuple[float, int, Path]]:
    out = []
    for path in folder.glob("entropycache-trace-*.json"):
        try:
            st = path.stat()
        except OSError:  # another worker removed it first
            continue
        out.append((st.st_mtime, st.st_size, path))
    return out


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # another worker removed it first
        pass
