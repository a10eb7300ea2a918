"""Two or more decoded texts side by side, each token that differs from the reference text at its
position marked and the first such token flagged: where a cached decode parts from the exact one.

The Sweep's picked point and the Race's result draw their texts with it. Token text comes from a
model's pieces (app/widgets/text_view.py), every piece HTML-escaped: a model's output is text. No
gradio here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

CSS = """
.ec-pair { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 14px; }
.ec-col-head { font-size: 12px; color: #666; font-weight: 600; }
.ec-diff { background: #ffd9d6; color: #000; border-radius: 3px; }
.ec-parted { outline: 2px solid #d62728; outline-offset: 1px; }
"""
LEGEND = ('<span><span class="ec-tok ec-diff">word</span> differs from the other text (same position)</span>'
          '<span><span class="ec-tok ec-diff ec-parted">word</span> the first token where they part</span>')


def diff_column(title: str, tokens: Sequence[int], other: Sequence[int], first: int, pieces: Mapping[int, str],
                sep: str) -> str:
    """A text as tokens, each one that differs from `other` at its position marked, the one at `first`
    (evaluation.bench.first_divergence) flagged, each titled with its place counted from 1."""
    spans = []
    for i, token in enumerate(tokens):
        differs = i >= len(other) or other[i] != token
        classes = "ec-tok" + (" ec-diff" if differs else "") + (" ec-parted" if differs and i == first else "")
        spans.append(f'<span class="{classes}" title="token {i + 1}">{html.escape(pieces.get(token, "?"))}</span>')
    body = sep.join(spans) or '<span class="ec-end">(no text)</span>'
    return f'<div><div class="ec-col-head">{html.escape(title)}</div><div class="ec-text">{body}</div></div>'


def parting(first: int, reference: int, tokens: int, owner: str) -> str:
    """Where a text of `tokens` tokens parts from `owner`'s text of `reference` (another text), in words,
    tokens counted from 1: `first` is evaluation.bench.first_divergence, the tokens they share from
    the start. A text that holds the other whole and goes on, or stops inside it, is said so."""
    if not reference:
        return f"{_count(tokens)} where {owner} has no text"
    if not tokens:
        return f"no text, where {owner} has {_count(reference)}"
    if first == reference:
        return f"{owner}'s {_count(reference)}, then {tokens - first} more"
    if first == tokens:
        return f"stops after the first {first} of {owner}'s {_count(reference)}"
    return f"parts from {owner}'s text at token {first + 1} of {reference}"


def _count(n: int) -> str:
    return f"{n} token{'s' * (n != 1)}"
