"""The Explain panel's text (app/widgets/explain.py): a step's rows, tokens and reason, and what the next
step did, in the policy's own words; bad inputs refused clearly."""

from __future__ import annotations

import html

import pytest
from races import PROMPT
from step_events import step_event

from app.serving.registry import EMBEDDED_LABEL
from app.widgets.explain import explain_step
from core.config import DecodeConfig
from core.decoder import decode
from core.events import StepEvent
from core.loading import chat_prompt_ids
from core.policies import make_policy


class WordTokenizer:
    WORDS = {5: "seven", 6: "<b>", 7: "+"}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(self.WORDS.get(i, f"w{i}") for i in ids)


def event(**overrides) -> StepEvent:
    """A partial step 4 of block 1 that unmasked one token; `overrides` over it."""
    fields = dict(step=4, block=1, prompt_len=10, tokens=[5, 6, 0, 0, 0, 0, 0, 0], unmasked=[11], unmasked_tokens=[6],
                  entropies=[0.2], max_entropy=0.2, reason="partial: max entropy 0.100 <= tau 0.5",
                  rows=[11, 12, 13, 14, 15, 16, 17], layer_rows=[7, 7], compute_s=0.01, decision_s=0.001)
    return step_event(**{**fields, **overrides})


def test_explain_a_partial_step_counts_rows_and_says_what_the_next_step_did_in_its_own_words() -> None:
    after = event(step=5, reason="partial: max entropy 0.200 <= tau 0.5")
    markdown = explain_step(event(), after, WordTokenizer())
    assert "partial&#58; max entropy 0&#46;100 &#60;&#61; tau 0&#46;5" in markdown  # the policy's reason, inert
    assert "<code>&#60;b&#62;</code> at position 1" in markdown  # the decoded token, inert
    text = html.unescape(markdown)  # as it reads
    assert "**Step 4** (block 1)" in text and "**partial** step" in text
    assert "**7 of 18 rows**" in text and "(10 prompt + 8 response)" in text and "reused **11**" in text
    assert "<code><b></code> at position 1 (entropy 0.200 nats)" in text
    assert "**Next step: partial.** Step 5's reason: *partial: max entropy 0.200 <= tau 0.5*." in text
    assert "full recompute" not in text and "above tau" not in text


def test_explain_a_full_step_followed_by_a_full_one_gives_that_steps_reason() -> None:
    e = event(step=0, block=0, full=True, reason="full: first step of the block", rows=list(range(18)),
              unmasked=[10, 12], unmasked_tokens=[5, 7], entropies=[0.1, 1.75], max_entropy=1.75)
    after = event(step=1, block=0, full=True, reason="full: last step's max entropy 1.750 > tau 0.5",
                  rows=list(range(18)))
    text = html.unescape(explain_step(e, after, WordTokenizer()))
    assert "**Step 0** (block 0) was a **full** step" in text and "full: first step of the block" in text
    assert "**18 of 18 rows**" in text and "reused **0**" in text and "100% computed" in text
    assert "It unmasked 2 tokens" in text and "the highest entropy 1.750" in text
    assert "<code>seven</code> at position 0 (entropy 0.100 nats)" in text
    assert "<code>+</code> at position 2 (entropy 1.750 nats)" in text
    assert "**Next step: full recompute.** Step 1's reason: *full: last step's max entropy 1.750 > tau 0.5*." in text


def test_explain_the_end_of_a_block_says_the_next_step_was_full_with_that_steps_reason() -> None:
    after = event(step=5, block=2, full=True, reason="full: first step of the block", rows=list(range(18)))
    text = html.unescape(explain_step(event(block_done=True), after, WordTokenizer()))
    assert "last masked token of block 1: the next step opens block 2" in text
    assert "**Next step: full recompute.** Step 5's reason: *full: first step of the block*." in text
    assert "**Next step: partial.**" not in text
    # The events are the whole story: a policy that went on partially after a block would be told so.
    other = html.unescape(explain_step(event(block_done=True), event(step=5, block=2, reason="partial: my own rule"),
                                       WordTokenizer()))
    assert "**Next step: partial.** Step 5's reason: *partial: my own rule*." in other and "full recompute" not in other


def test_decoded_events_mark_the_step_that_finishes_each_block(registry) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, PROMPT)
    events = list(decode(model, ids, make_policy("entropy"), DecodeConfig(gen_len=32, block_len=16, stop_at_eos=False)))
    assert [e.step for e in events if e.block_done] == [15, 31]
    assert [e.block for e in events if e.block_done] == [0, 1]


def test_explain_the_last_step_and_a_step_that_unmasked_nothing() -> None:
    assert "This was the last step" in explain_step(event(done=True), None, WordTokenizer())
    empty = event(unmasked=[], unmasked_tokens=[], entropies=[], max_entropy=0.0)
    assert "It unmasked no token." in explain_step(empty, event(step=5), WordTokenizer())


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (dict(event={"step": 0}), TypeError, "needs a StepEvent"),
        (dict(next_event={"step": 5}), TypeError, "needs a StepEvent"),
        (dict(event=event(entropies=[])), ValueError, "1 unmasked positions, 1 tokens, 0 entropies"),
        (dict(event=event(rows=list(range(19)))), ValueError, "19 rows computed of a 18-row sequence"),
        (dict(next_event=event(step=5, entropies=[])), ValueError, "inconsistent step 5"),
        (dict(next_event=event(step=7)), ValueError, "step 7 does not follow step 4"),
        (dict(event=event(done=True)), ValueError, "step 5 does not follow step 4, the last step"),
    ],
)
def test_explain_refuses_bad_inputs_clearly(bad: dict, error: type, message: str) -> None:
    args = dict(event=event(), next_event=event(step=5), tokenizer=WordTokenizer()) | bad
    with pytest.raises(error, match=message):
        explain_step(**args)


def test_explain_a_layer_wise_step_gives_each_layers_rows_and_the_hooks_finding() -> None:
    reason = ("partial: tracked + last decoded + window rows; tracked attention similarity 0.812 < gamma 0.9 at "
              "layer 0: layers 1+ recomputed in full")
    e = event(reason=reason, rows=list(range(18)), layer_rows=[7, 18])
    text = html.unescape(explain_step(e, None, WordTokenizer()))
    assert "**18 of 18 rows**" in text and "a **partial** step" in text
    assert "Its layers computed different rows: 7, 18 (layers 0 to 1)" in text
    assert "layers 1+ recomputed in full" in text
    assert "different rows" not in explain_step(event(), None, WordTokenizer())  # the same rows at every layer
