"""Where a command line writes: checked before its work, and written at its end.

A bench can take an hour and a training run a day; a result path that cannot be written would lose
that work at the end, so each command checks its paths first. The check makes nothing: a run refused
later for another reason leaves no empty folders behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def unwritable(path: str | Path, folder: bool = False) -> str:
    """What keeps a run from writing `path` (a folder if `folder`, else a file), making the folders on
    its way; '' when nothing does."""
    kind = "folder" if folder else "file"
    if not str(path).strip():
        return f"name a {kind}"
    target = Path(path).absolute()
    if target.exists():
        if target.is_dir() != folder:
            return f"{target} is a {'file' if folder else 'folder'}, not a {kind}"
        return "" if os.access(target, os.W_OK) else f"{target} cannot be written"
    there = next(p for p in target.parents if p.exists())  # the root is always there
    if not there.is_dir():
        return f"{there} is a file"
    return "" if os.access(there, os.W_OK) else f"{there} cannot be written"


def check_writable(path: str | Path, flag: str, folder: bool = False) -> None:
    """A ValueError naming `flag` and what is wrong, unless `path` can be written (see unwritable)."""
    if problem := unwritable(path, folder):
        raise ValueError(f"{flag} {str(path)!r}: {problem}")


def write_json(path: str | Path, value: object) -> None:
    """`value` as indented JSON at `path`, its folders made."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(value, indent=1) + "\n")
