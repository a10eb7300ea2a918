"""The replays the server holds for its sessions: at most one per session, and at most MAX_REPLAYS and
MAX_STORED_BYTES in all, the least recently used dropped first.

A replay is a whole trace read into memory, and a trace may be large (a long prompt's full steps list
every row); a session keeps its replay for as long as it may want it, and sessions are many. So a
session holds only a key (in its gr.State), and the replays live here, each counted by what it holds
(replay_bytes): the store, not the number of visitors, bounds the memory replays take. A session whose
replay was dropped is told so and loads it again. No gradio here.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from app.race.replay import Replay
from app.serving.heap import release_memory

MAX_STORED_BYTES = 192 * 2**20  # every session's replays together, as replay_bytes counts them
MAX_REPLAYS = 64
# What a value in a parsed trace costs: a list's pointer and the int or float it points to (CPython, 64-bit).
VALUE_BYTES = 36
EVENT_BYTES = 1024  # a step's own objects: its event, its lists, its reason
LIST_FIELDS = ("tokens", "unmasked", "unmasked_tokens", "entropies", "confidences", "rows", "layer_rows")  # a step's
DROPPED = "This replay was dropped to make room for other visitors' replays: load the trace (or replay the race) again."


@dataclass(frozen=True)
class StoredReplay:
    """What a session holds: the key of its replay here, and its size (for messages)."""

    key: str
    size: int


def replay_bytes(replay: Replay) -> int:
    """About how much memory `replay` holds: its steps' values and its token texts."""
    trace = replay.trace
    values = len(trace.prompt_ids) + len(replay.frames) * 3
    events = [e for lane in trace.lanes for e in lane.events]
    values += sum(len(getattr(e, name)) for e in events for name in LIST_FIELDS)
    text = sum(len(piece) + VALUE_BYTES for piece in trace.model.pieces.values())
    text += sum(len(lane.text) for lane in trace.lanes) + sum(len(e.reason) for e in events)
    return values * VALUE_BYTES + len(events) * EVENT_BYTES + text


class ReplayStore:
    def __init__(self, max_bytes: int = MAX_STORED_BYTES, max_replays: int = MAX_REPLAYS) -> None:
        self.max_bytes, self.max_replays = max_bytes, max_replays
        self._lock = threading.Lock()
        self._replays: OrderedDict[str, tuple[Replay, int]] = OrderedDict()  # least recently used first

    def put(self, replay: Replay, replacing: object = None) -> StoredReplay:
        """Keep `replay` for a session, dropping the replay it had (`replacing`) and then the least
        recently used until the caps hold; a ValueError if it alone is larger than the store."""
        size = replay_bytes(replay)
        if size > self.max_bytes:
            raise ValueError(f"This trace takes about {size / 2**20:.0f} MB once read; a replay here may take at most "
                             f"{self.max_bytes / 2**20:.0f} MB. Replay a shorter race.")
        with self._lock:
            if isinstance(replacing, StoredReplay):
                self._replays.pop(replacing.key, None)
            while self._replays and (len(self._replays) >= self.max_replays or self.used + size > self.max_bytes):
                self._replays.popitem(last=False)
            key = uuid.uuid4().hex
            self._replays[key] = (replay, size)
        release_memory()  # what the dropped replays and the trace's reading held
        return StoredReplay(key, size)

    def get(self, stored: object) -> Replay | None:
        """The session's replay (now the most recently used), or None: it has none, or it was dropped."""
        if not isinstance(stored, StoredReplay):
            return None
        with self._lock:
            entry = self._replays.get(stored.key)
            if entry is None:
                return None
            self._replays.move_to_end(stored.key)
            return entry[0]

    def dropped(self, stored: object) -> bool:
        """Whether the session had a replay that is gone now."""
        return isinstance(stored, StoredReplay) and self.get(stored) is None

    @property
    def used(self) -> int:
        return sum(size for _, size in self._replays.values())

    def __len__(self) -> int:
        return len(self._replays)
