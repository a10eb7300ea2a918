"""The Race's HTTP API read by name: an API client (gradio_client's `predict` or `submit`) gets an
endpoint's outputs as a tuple in the order its panels declare (app/race/panels.py's OUTPUT_NAMES for
`/run`, app/race/replay_panel.py's REPLAY_OUTPUT_NAMES for the replay's endpoints); `named` turns one
such tuple into a dict, so that scripts and tests read `out["right.final"]`, not `out[14]`, and a new
panel moves no client's index. (The middle lane's column, a layout block, is shown or hidden by the
handlers but is no output of the HTTP API.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.race.panels import OUTPUT_NAMES
from app.race.replay_panel import REPLAY_OUTPUT_NAMES

NAMES = {"/run": OUTPUT_NAMES, "/replay_load": REPLAY_OUTPUT_NAMES, "/replay_race": REPLAY_OUTPUT_NAMES,
         "/replay_show": REPLAY_OUTPUT_NAMES, "/replay_pause": REPLAY_OUTPUT_NAMES, "/replay_play": REPLAY_OUTPUT_NAMES}


def named(outputs: Sequence[Any], api_name: str = "/run") -> dict[str, Any]:
    """An answer of the Race's endpoint `api_name`, its outputs by name."""
    names = NAMES[api_name]
    if len(outputs) != len(names):
        raise ValueError(f"expected {api_name}'s {len(names)} outputs, got {len(outputs)}")
    return dict(zip(names, outputs))
