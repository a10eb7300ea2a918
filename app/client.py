"""The app's HTTP API read by name: an API client (gradio_client's `predict` or `submit`) gets an
endpoint's outputs as a tuple in the order its tab declares them; `named` turns one such tuple into a
dict, so that scripts and tests read `out["right.final"]` or `out["status"]`, not `out[14]`, and a new
panel moves no client's index. Each tab declares its endpoints' names once, beside its panels: the
Race's `/run` (app/race/panels.py OUTPUT_NAMES) and replay (app/race/replay_panel.py), the Drift tab's
`/drift`, the Sweep's `/sweep` and `/sweep_pick`. (Server-side state and layout blocks, such as the
middle lane's column, are no outputs of the HTTP API.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.drift.tab import DRIFT_OUTPUTS
from app.race.panels import OUTPUT_NAMES
from app.race.replay_panel import REPLAY_OUTPUT_NAMES
from app.sweep.panels import SWEEP_OUTPUTS, pick_names
from app.ui import PICKED_INTO

REPLAYS = ("/replay_load", "/replay_race", "/replay_show", "/replay_pause", "/replay_play")
NAMES = {"/run": OUTPUT_NAMES, "/drift": DRIFT_OUTPUTS, "/sweep": SWEEP_OUTPUTS,
         "/sweep_pick": pick_names(PICKED_INTO),
         **dict.fromkeys(REPLAYS, REPLAY_OUTPUT_NAMES)}


def named(outputs: Sequence[Any], api_name: str = "/run", raw: bool = False) -> dict[str, Any]:
    """An answer of the app's endpoint `api_name`, its outputs by name. `raw`: the data of a raw HTTP call
    (POST /gradio_api/call/...), which also carries the outputs that stay server-side (a session's
    state, a layout block); every tab lists those after the HTTP API's."""
    names = NAMES[api_name]
    outputs = outputs[:len(names)] if raw else outputs
    if len(outputs) != len(names):
        raise ValueError(f"expected {api_name}'s {len(names)} outputs, got {len(outputs)}")
    return dict(zip(names, outputs))
