"""Where the lanes' texts part, once a race has finished: every lane's answer (its tokens before its
end-of-text) side by side, each token that differs from the left lane's at its position marked and
the first flagged (the left lane's own against EntropyCache's), with each lane's agreement with the
left lane and its first divergence in words. A cache that reuses stale rows, or parallel decoding,
may choose other tokens than the exact decoder one token at a time; this is where a visitor sees it.
No gradio here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import NamedTuple

from app.race.comparison import LaneLabel
from app.race.decode import Lane
from app.widgets.text_diff import LEGEND, diff_column, parting
from app.widgets.text_view import TokenText
from evaluation.bench import first_divergence, matched_positions


class Parting(NamedTuple):
    """One lane's answer against the left lane's."""

    tokens: list[int]  # its answer: the tokens before its end-of-text
    agreement: float | None  # share of the left lane's answer it matches at the same positions (None: empty)
    first: int  # the tokens it shares with the left lane's answer from the start (first_divergence)


def partings(lanes: Sequence[Lane]) -> list[Parting]:
    """Each lane's answer against the left lane's (the left lane's own against the right lane's)."""
    answers = [lane.last.tokens[: lane.last.totals.tokens] for lane in lanes]
    out = []
    for i, answer in enumerate(answers):
        reference = answers[-1] if i == 0 else answers[0]
        agreement = matched_positions(reference, answer) / len(reference) if reference else None
        out.append(Parting(answer, agreement, first_divergence(reference, answer)))
    return out


def parted_html(lanes: Sequence[Lane], labels: Sequence[LaneLabel], text: TokenText) -> str:
    """The finished race's answers side by side, and where each parts from the left lane's."""
    parts = partings(lanes)
    reference = parts[0].tokens
    words = [_said(label, part, reference) for label, part in zip(labels[1:], parts[1:])]
    columns = [diff_column(f"{label.title} ({label.schedule})", part.tokens,
                           parts[-1].tokens if i == 0 else reference, part.first, text.pieces(part.tokens), text.sep)
               for i, (label, part) in enumerate(zip(labels, parts))]
    return (f'<div class="ec-parted-head">Where the texts part. {html.escape(" ".join(words), quote=False)}</div>'
            f'<div class="ec-legend">{LEGEND}</div><div class="ec-pair">{"".join(columns)}</div>')


def _said(label: LaneLabel, part: Parting, reference: list[int]) -> str:
    name = label.title
    if part.tokens == reference:
        return f"{name}: the same text as the left lane ({len(reference)} tokens)."
    agreement = "" if part.agreement is None else f"; agreement {part.agreement:.3f}"
    return f"{name}: {parting(part.first, len(reference), len(part.tokens), 'the left lane')}{agreement}."


CSS = """
.ec-parted-head { font-size: 14px; margin: 4px 0 6px; }
"""
