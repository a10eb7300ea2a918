"""A StepEvent for a test that builds one by hand: every required field at a neutral value (step 0 of
block 0, nothing unmasked, nothing computed, no time), so a test names only what it is about."""

from core.events import StepEvent

NEUTRAL = dict(step=0, block=0, prompt_len=1, tokens=[], unmasked=[], unmasked_tokens=[], entropies=[], max_entropy=0.0,
               full=False, reason="", rows=[], layer_rows=[], compute_s=0.0, decision_s=0.0)


def step_event(**fields) -> StepEvent:
    """A StepEvent of `fields` over NEUTRAL."""
    return StepEvent(**{**NEUTRAL, **fields})
