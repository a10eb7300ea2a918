"""A plain-language account of one decode step, made from its StepEvent and the next one (markdown).

It says what the step did (full or partial, and the policy's own reason), how much of the cache it
computed and reused, which tokens it unmasked with their confidence and entropy, and what the next step did and
why, in that step's own reason. Nothing here knows a policy's rule: whatever the policy decided is in
the events. No gradio here; token text and reasons are inert (app/widgets/inert.py): a model may emit
markup, and a shared trace may carry any text.
"""

from __future__ import annotations

from app.widgets.inert import inert
from core.events import StepEvent


def explain_step(event: StepEvent, next_event: StepEvent | None, tokenizer) -> str:
    """Markdown paragraph(s) about `event`; `next_event` is the step after it (None for the last one).

    Raises TypeError for something that is not a StepEvent and ValueError for an inconsistent event
    or a next event that does not follow it."""
    _check(event)
    if next_event is not None:
        _check(next_event)
        if event.done or next_event.step != event.step + 1:
            raise ValueError(f"step {next_event.step} does not follow step {event.step}"
                             + (", the last step" if event.done else ""))
    length = event.prompt_len + len(event.tokens)
    computed = len(event.rows)
    kind = "a **full** step" if event.full else "a **partial** step"
    parts = [
        f"**Step {event.step}** (block {event.block}) was {kind}. The policy's reason: *{_escape(event.reason)}*.",
        f"It computed **{computed} of {length} rows** ({event.prompt_len} prompt + {len(event.tokens)} response) "
        f"and reused **{length - computed}** from the cache ({computed / length:.0%} computed).",
        _unmasked(event, tokenizer),
    ]
    if len(set(event.layer_rows)) > 1:  # a layer-wise policy: the count above is the rows of any layer
        per_layer = ", ".join(str(n) for n in event.layer_rows)
        parts.insert(2, f"Its layers computed different rows: {per_layer} (layers 0 to {len(event.layer_rows) - 1}); "
                        "the count above is of the rows computed at any layer.")
    if event.block_done and not event.done:
        parts.append(f"It decoded the last masked token of block {event.block}: the next step opens block "
                     f"{event.block + 1}.")
    parts.append(_next(event, next_event))
    return "\n\n".join(parts)


def _check(event: object) -> None:
    if not isinstance(event, StepEvent):
        raise TypeError(f"explain_step needs a StepEvent, got {type(event).__name__}")
    n = len(event.unmasked)
    if len(event.unmasked_tokens) != n or len(event.entropies) != n or len(event.confidences) not in (0, n):
        raise ValueError(
            f"inconsistent step {event.step}: {n} unmasked positions, {len(event.unmasked_tokens)} tokens, "
            f"{len(event.entropies)} entropies, {len(event.confidences)} confidences"
        )
    length = event.prompt_len + len(event.tokens)
    if length <= 0 or len(event.rows) > length:
        raise ValueError(f"inconsistent step {event.step}: {len(event.rows)} rows computed of a {length}-row sequence")


def _piece(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return f"<code>{_escape(text if text.strip() else repr(text))}</code>"


def _unmasked(event: StepEvent, tokenizer) -> str:
    if not event.unmasked:
        return "It unmasked no token."
    sure = [f"confidence {c:.0%}, " for c in event.confidences] or [""] * len(event.unmasked)  # older events: none
    items = [f"{_piece(tokenizer, tok)} at position {pos - event.prompt_len} ({c}entropy {ent:.3f} nats)"
             for pos, tok, c, ent in zip(event.unmasked, event.unmasked_tokens, sure, event.entropies)]
    if len(items) == 1:
        return f"It unmasked 1 token: {items[0]}."
    return f"It unmasked {len(items)} tokens: " + "; ".join(items) + f"; the highest entropy {event.max_entropy:.3f}."


def _next(event: StepEvent, next_event: StepEvent | None) -> str:
    if next_event is None:
        if event.done:
            return "This was the last step: the response is complete."
        return "No step followed it."
    kind = "full recompute" if next_event.full else "partial"
    return (f"**Next step: {kind}.** Step {next_event.step}'s reason: *{_escape(next_event.reason)}*.")


def _escape(text: str) -> str:
    """Text a model or a policy wrote (or a trace carries), shown as text: no Markdown, no HTML."""
    return inert(text)
