"""HTML of a partially unmasked response: masks visible, this step's news highlighted.

Every piece of token text is HTML-escaped: a model can emit '<script>' as well as anything else.
"""

from __future__ import annotations

import html

from core.events import StepEvent

CSS = """
.ec-text { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 14px; line-height: 2;
  white-space: pre-wrap; word-break: break-word; min-height: 3em; }
.ec-tok { padding: 1px 1px; border-bottom: 2px solid transparent; }
.ec-mask { display: inline-block; width: 0.9em; height: 0.9em; margin: 0 1px; vertical-align: middle;
  background: #d0d4dc; border-radius: 2px; border-bottom: 2px solid transparent; }
.ec-new { background: #ffd84d; color: #000; border-radius: 3px; }
.ec-rc { border-bottom-color: #2f6fed; }
.ec-mask.ec-rc { background: #a9bff5; }
.ec-end { color: #8a8f98; font-size: 11px; }
.ec-legend { font-size: 12px; color: #666; margin-bottom: 4px; }
.ec-legend span { margin-right: 10px; }
"""

LEGEND = (
    '<div class="ec-legend"><span><span class="ec-mask"></span> masked</span>'
    '<span><span class="ec-tok ec-new">tok</span> unmasked this step</span>'
    '<span><span class="ec-tok ec-rc">tok</span> cache row recomputed this step</span></div>'
)


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

    def piece(self, token_id: int) -> str:
        if token_id not in self._cache:
            self._cache[token_id] = self.tokenizer.decode([token_id])
        return self._cache[token_id]


def render_text(event: StepEvent | None, text: TokenText, gen_len: int) -> str:
    """The response after `event` (all masks before the first step), as HTML."""
    if event is None:
        spans = ['<span class="ec-mask"></span>'] * gen_len
        return f'{LEGEND}<div class="ec-text">{text.sep.join(spans)}</div>'
    p = event.prompt_len
    new = {pos - p for pos in event.unmasked}
    recomputed = {pos - p for pos in event.rows if pos >= p}
    tokens = event.tokens
    end = _trailing_end(tokens, text.eos_ids)
    spans = [_span(i, t, text, i in new, i in recomputed) for i, t in enumerate(tokens[:end])]
    if end < len(tokens):
        spans.append(f'<span class="ec-end">[end of text, {len(tokens) - end} positions]</span>')
    prompt_rows = sum(1 for pos in event.rows if pos < p)
    note = f'<div class="ec-legend">step {event.step + 1}: prompt rows recomputed {prompt_rows}/{p}</div>'
    return f'{LEGEND}{note}<div class="ec-text">{text.sep.join(spans)}</div>'


def _span(i: int, token: int, text: TokenText, new: bool, recomputed: bool) -> str:
    classes = ["ec-mask" if token == text.mask_id else "ec-tok"]
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
