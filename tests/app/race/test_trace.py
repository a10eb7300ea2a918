"""Trace files (app/race/trace.py) in the downloads folder (app/serving/downloads.py): only the newest
within the caps."""

from __future__ import annotations

import os
import time

import app.serving.downloads
from app.race.trace import write_trace


def test_trace_folder_keeps_only_the_newest_files_within_the_caps(monkeypatch, tmp_path) -> None:
    now = time.time()
    for i in range(6):  # old0 is the oldest
        (tmp_path / f"entropycache-trace-old{i}.json").write_text("x" * 100)
        os.utime(tmp_path / f"entropycache-trace-old{i}.json", (now - 100 + i, now - 100 + i))
    stale = tmp_path / "entropycache-trace-stale.json"
    stale.write_text("{}")
    os.utime(stale, (now - app.serving.downloads.MAX_AGE_S - 10,) * 2)
    (tmp_path / "not-a-trace.json").write_text("{}")

    def traces() -> set[str]:
        return {p.name for p in tmp_path.glob("entropycache-trace-*.json")}

    monkeypatch.setattr(app.serving.downloads, "MAX_FILES", 4)
    first = write_trace({"n": 1}, tmp_path)
    assert traces() == {first.name, *(f"entropycache-trace-old{i}.json" for i in (3, 4, 5))}
    monkeypatch.setattr(app.serving.downloads, "MAX_FILES", 200)
    monkeypatch.setattr(app.serving.downloads, "MAX_BYTES", 250)  # first + old5 + old4 fit; old3 would pass the cap
    second = write_trace({"n": 2}, tmp_path)
    assert traces() == {first.name, second.name, "entropycache-trace-old5.json", "entropycache-trace-old4.json"}
    assert (tmp_path / "not-a-trace.json").exists()
