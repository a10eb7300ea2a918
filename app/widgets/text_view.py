"""HTML of a partially unmasked response: masks visible, this step's news outlined, every decoded token
coloured by the confidence it was chosen with (viridis bins: colour-blind safe, dark = unsure), and the
positions after a decoded end-of-text (the tail: text that is over, still decoded mask by mask, whose
K/V no partial step of a block-local cache recomputes) hatched.

Every piece of token text is HTML-escaped: a model can emit '<script>' as well as anything else.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping

from core.events import StepEvent

# (upper bound, background, text colour) of each confidence bin: viridis, readable text on each
CONFIDENCE_BINS = ((0.2, "#440154", "#fff"), (0.4, "#3b528b", "#fff"), (0.6, "#21918c", "#fff"),
                   (0.8, "#5ec962", "#000"), (1.01, "#fde725", "#000"))

CSS = """
.ec-text { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 14px; line-height: 2;
  white-space: pre-wrap; word-break: break-word; min-height: 3em; }
.ec-tok { padding: 1px 1px; border-bottom: 2px solid transparent; }
.ec-mask { display: inline-block; width: 0.9em; height: 0.9em; margin: 0 1px; vertical-align: middle;
  background: #d0d4dc; border-radius: 2px; border-bottom: 2px solid transparent; }
.ec-new { outline: 2px solid #d62728; outline-offset: 1px; border-radius: 3px; }
.ec-rc { border-bottom-color: #2f6fed; }
.ec-mask.ec-rc { background: #a9bff5; }
.ec-end { color: #8a8f98; font-size: 11px; }
.ec-tail { background-image: repeating-linear-gradient(45deg, transparent 0 3px, #8a8f9866 3px 5px); }
.ec-legend, .ec-step-note { font-size: 12px; color: #666; margin-bottom: 4px; }
.ec-legend span { margin-right: 10px; }
""" + "".join(f".ec-c{i} {{ background: {bg}; color: {fg}; border-radius: 3px; }}\n"
            for i, (_, bg, fg) in enumerate(CONFIDENCE_BINS))

LEGEND = (
    '<div class="ec-legend"><span><span class="ec-mask"></span> masked</span>'
    '<span><span class="ec-tok ec-new">tok</span> unmasked this step</span>'
    '<span><span class="ec-tok ec-rc">tok</span> cache row recomputed this step</span>'
    '<span><span class="ec-mask ec-tail"></span> after an end-of-text</span></div>'
    '<div class="ec-legend">confidence when unmasked: '
    + "".join(f'<span class="ec-tok ec-c{i}">{low:.0%}-{min(high, 1):.0%}</span>'
              for i, (low, (high, _, _)) in enumerate(zip((0, 0.2, 0.4, 0.6, 0.8), CONFIDENCE_BINS)))
    + "</div>"
)


def confidence_by_position(events: Iterable[StepEvent]) -> dict[int, float]:
    """Response index -> the confidence its token was chosen with, over the events so far."""
    out = {}
    for e in events:
        out.update((pos - e.prompt_len, c) for pos, c in zip(e.unmasked, e.confidences))
    return out


def confidence_bin(confidence: float) -> int:
    return next(i for i, (high, _, _) in enumerate(CONFIDENCE_BINS) if confidence < high)


class TokenText:
    """Per-token display text for one tokenizer, memoised (the same ids come back every step)."""

    def __init__(self, tokenizer, mask_id: int, eos_ids: tuple[int, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.mask_id = mask_id
        self.eos_ids = set(eos_ids)
        self._cache: dict[int, str] = {}
        self.sep = self._separator()

    def _separator(self) -> str:
        """' ' for word-level tokenizers (decode joins words with spaces), '' when pieces carry their spaces."""
        a, b = self.piece(self.mask_id), self.piece(self.mask_id)
        joined = self.tokenizer.decode([self.mask_id, self.mask_id])
        return " " if joined == f"{a} {b}" and joined != a + b else ""

    @classmethod
    def from_pieces(cls, pieces: Mapping[int, str], sep: str, mask_id: int, eos_ids: Iterable[int]) -> TokenText:
        """Token text recorded in a trace (app/race/trace.py): a replay needs no tokenizer, so a race recorded
        with any model replays anywhere."""
        self = cls.__new__(cls)
        self.tokenizer, self.mask_id, self.eos_ids = None, mask_id, set(eos_ids)
        self._cache, self.sep = dict(pieces), sep
        return self

    def piece(self, token_id: int) -> str:
        if token_id not in self._cache:
            self._cache[token_id] = self.tokenizer.decode([token_id])
        return self._cache[token_id]

    def pieces(self, ids: Iterable[int]) -> dict[int, str]:
        """id -> text of each of `ids` (what a trace records)."""
        return {i: self.piece(i) for i in ids}

    def decode(self, ids: list[int]) -> str:
        """Like a tokenizer's decode of these ids (app/widgets/explain.py reads token text this way)."""
        return self.sep.join(self.piece(i) for i in ids)


def render_text(event: StepEvent | None, text: TokenText, gen_len: int,
                confidence: Mapping[int, float] | None = None) -> str:
    """The response after `event` (all masks before the first step), as HTML; `confidence` (response
    index -> confidence, confidence_by_position) colours the decoded tokens."""
    if event is None:
        spans = ['<span class="ec-mask"></span>'] * gen_len
        return f'{LEGEND}<div class="ec-text">{text.sep.join(spans)}</div>'
    p = event.prompt_len
    new = {pos - p for pos in event.unmasked}
    recomputed = {pos - p for pos in event.rows if pos >= p}
    tokens = event.tokens
    end = _trailing_end(tokens, text.eos_ids)
    tail = next((i + 1 for i, t in enumerate(tokens) if t in text.eos_ids), len(tokens))
    confidence = confidence or {}
    spans = [_span(i, t, text, i in new, i in recomputed, confidence.get(i), i >= tail)
             for i, t in enumerate(tokens[:end])]
    if end < len(tokens):
        rest = len(tokens) - end
        spans.append(f'<span class="ec-end">[end of text, {rest} position{"s" * (rest != 1)}]</span>')
    prompt_rows = sum(1 for pos in event.rows if pos < p)
    note = f'<div class="ec-step-note">step {event.step}: prompt rows recomputed {prompt_rows}/{p}</div>'
    return f'{LEGEND}{note}<div class="ec-text">{text.sep.join(spans)}</div>'


def _span(i: int, token: int, text: TokenText, new: bool, recomputed: bool, confidence: float | None,
          tail: bool) -> str:
    classes = ["ec-mask" if token == text.mask_id else "ec-tok"]
    if tail:
        classes.append("ec-tail")
    if confidence is not None and token != text.mask_id:
        classes.append(f"ec-c{confidence_bin(confidence)}")
    if new:
        classes.append("ec-new")
    if recomputed:
        classes.append("ec-rc")
    body = "" if token == text.mask_id else html.escape(text.piece(token))
    return f'<span class="{" ".join(classes)}">{body}</span>'


def _trailing_end(tokens: list[int], eos_ids: set[int]) -> int:
    """Index where the run of end-of-text tokens closing the response starts (len if none)."""
    end = len(tokens)
    while end > 0 and tokens[end - 1] in eos_ids:
        end -= 1
    if end < len(tokens):
        end += 1  # keep the first end-of-text visible, fold the rest
    return end
