"""The text view (app/widgets/text_view.py): tokens escaped, masks shown, recomputed rows and the tail marked."""

from __future__ import annotations

import dataclasses

from step_events import step_event

from app.widgets.text_view import TokenText, render_text


class WordTokenizer:
    pieces = {0: "<|mask|>", 1: "<|eos|>", 5: "<script>&", 6: "ok"}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        words = [self.pieces[i] for i in ids if not (skip_special_tokens and i in (0, 1))]
        return " ".join(words)


def test_token_text_is_escaped_masks_shown_and_marks_applied() -> None:
    text = TokenText(WordTokenizer(), mask_id=0, eos_ids=(1,))
    assert text.sep == " "
    event = step_event(step=3, prompt_len=2, tokens=[5, 0, 6, 1, 1], unmasked=[4], unmasked_tokens=[6],
                       entropies=[0.1], max_entropy=0.1, rows=[0, 3, 4], layer_rows=[3])
    out = render_text(event, text, 5)
    assert "<script>" not in out and "&lt;script&gt;&amp;" in out
    assert out.count('class="ec-mask ec-rc"') == 1  # position 3 (response index 1): masked and recomputed
    assert '<span class="ec-tok ec-new ec-rc">ok</span>' in out
    assert "[end of text, 1 position]" in out and "prompt rows recomputed 1/2" in out
    assert render_text(None, text, 4).split('class="ec-text">')[1].count('class="ec-mask"') == 4
    # An end-of-text decoded while masks stand before and after it: the positions after it are the tail
    tail = dataclasses.replace(event, tokens=[5, 0, 1, 0, 6], rows=[])
    out = render_text(tail, text, 5)
    assert out.count("ec-tail") == 2 + 1  # response indices 3 (masked) and 4, and the legend's
    assert '<span class="ec-mask ec-tail"></span> <span class="ec-tok ec-tail">ok</span>' in out
    assert '<span class="ec-mask"></span> <span class="ec-tok ec-new">&lt;|eos|&gt;</span>' in out  # up to it: no tail
