"""The files a visitor downloads (a race's trace, a sweep's points and texts): written by the server
into one folder of its own under the system temp dir (where Gradio may serve them from), each with a
random name; never a path a visitor sent.

Whenever a new one is written, files older than a day go, and then the oldest ones until at most
MAX_FILES - 1 files and MAX_BYTES remain: a busy server (a long race writes ~5 MB) cannot fill the disk
within the day.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

DOWNLOAD_DIR = Path(tempfile.gettempdir()) / "entropycache-traces"
PREFIX = "entropycache-"
MAX_AGE_S = 24 * 3600
MAX_FILES = 200
MAX_BYTES = 200 * 2**20


def write_download(text: str, kind: str, suffix: str, folder: Path = DOWNLOAD_DIR) -> Path:
    """`text` as a new file `entropycache-{kind}-{random}{suffix}` in `folder`, after pruning it."""
    folder.mkdir(parents=True, exist_ok=True)
    _prune(folder)
    path = folder / f"{PREFIX}{kind}-{uuid.uuid4().hex[:12]}{suffix}"
    path.write_text(text, encoding="utf-8")
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
    for path in folder.glob(f"{PREFIX}*-*.*"):
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
