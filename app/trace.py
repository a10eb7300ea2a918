"""The downloadable trace: every event of both decoders and the settings that produced them, as JSON.

Files go to one folder under the system temp dir (where Gradio may serve them from) with a random
name; files older than a day are removed whenever a new one is written.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path

from app.race import Lane

TRACE_DIR = Path(tempfile.gettempdir()) / "entropycache-traces"
MAX_AGE_S = 24 * 3600


def trace_dict(
    params: dict, prompt_ids: list[int], lanes: tuple[Lane, Lane], policies: tuple[str, str], texts: tuple[str, str],
    speedup: float | None,
) -> dict:
    return {
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
    cutoff = time.time() - MAX_AGE_S
    for old in folder.glob("entropycache-trace-*.json"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:  # another worker removed it first
            pass
