"""A plain-language account of one decode step, made from its StepEvent alone (markdown).

It says what the step did (full or partial, and the policy's own reason), how much of the cache it
computed and reused, which tokens it unmasked with their entropies against tau, and what EntropyCache
will do next because of them. No gradio here; token text is HTML-escaped (a model may emit markup).
"""

from __future__ import annotations

import html
import math

from core.events import StepEvent


def explain_step(event: StepEvent, tokenizer, tau: float) -> str:
    """Markdown paragraph(s) about `event`, for an EntropyCache decode with threshold `tau`.

    Raises TypeError for something that is not a StepEvent and ValueError for an inconsistent event
    or a tau that is not a finite, non-negative number."""
    if not isinstance(event, StepEvent):
        raise TypeError(f"explain_step needs a StepEvent, got {type(event).__name__}")
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau < 0:
        raise ValueError(f"tau must be a finite number >= 0, got {tau!r}")
    n = len(event.unmasked)
    if len(event.unmasked_tokens) != n or len(event.entropies) != n:
        raise ValueError(
            f"inconsistent step {event.step}: {n} unmasked positions, {len(event.unmasked_tokens)} tokens, "
            f"{len(event.entropies)} entropies"
        )
    length = event.prompt_len + len(event.tokens)
    computed = len(event.rows)
    if length <= 0 or computed > length:
        raise ValueError(f"inconsistent step {event.step}: {computed} rows computed of a {length}-row sequence")
    reused = length - computed

    kind = "a **full** step" if event.full else "a **partial** step"
    parts = [
        f"**Step {event.step}** (block {event.block}) was {kind}. The policy's reason: *{html.escape(event.reason)}*.",
        f"It computed **{computed} of {length} rows** ({event.prompt_len} prompt + {len(event.tokens)} response) "
        f"and reused **{reused}** from the cache ({computed / length:.0%} computed).",
    ]
    parts.append(_unmasked(event, tokenizer, tau))
    parts.append(_next(event, tau))
    return "\n\n".join(parts)


def _piece(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return f"<code>{html.escape(text) if text.strip() else repr(text)}</code>"


def _unmasked(event: StepEvent, tokenizer, tau: float) -> str:
    if not event.unmasked:
        return "It unmasked no token."
    items = []
    for pos, tok, ent in zip(event.unmasked, event.unmasked_tokens, event.entropies):
        side = "above" if ent > tau else "at or below"
        items.append(f"{_piece(tokenizer, tok)} at position {pos - event.prompt_len} "
                     f"(entropy {ent:.3f} nats, {side} tau {tau:g})")
    noun = "token" if len(items) == 1 else "tokens"
    return f"It unmasked {len(items)} {noun}: " + "; ".join(items) + "."


def _next(event: StepEvent, tau: float) -> str:
    if event.done:
        return "This was the last step: the response is complete."
    if event.block_done:
        also = (f" (Its highest entropy, {event.max_entropy:.3f}, is above tau ({tau:g}) too, which alone would "
                "have asked for a full recompute.)" if event.max_entropy > tau else "")
        return (f"**Next step: full recompute.** This step decoded the last masked token of block {event.block}, "
                "so the next step opens a new block, and the first step of every block recomputes every row."
                + also)
    if event.max_entropy > tau:
        return (f"**Next step: full recompute.** The highest entropy decoded here ({event.max_entropy:.3f}) is "
                f"above tau ({tau:g}): the model was unsure, so the cache has likely drifted and EntropyCache "
                "recomputes every row next step.")
    return (f"**Next step: partial.** Every token decoded here had entropy at or below tau (max "
            f"{event.max_entropy:.3f} <= {tau:g}), so EntropyCache trusts the cache and next step recomputes "
            "only the block's masked rows, the tokens just decoded and the k most recent ones.")
