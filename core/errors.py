"""An error in the words a status line has room for: what the fast paths say when they fall back to
eager passes (a capture that failed, core/passes.py; a pass or a part that did not compile,
core/compiled.py and core/fusion.py), and what a check reports."""

from __future__ import annotations


def error_line(error: Exception) -> str:
    """An error's type and the first line of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
