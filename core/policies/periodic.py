"""dLLM-Cache's schedule without its value-similarity check.

Prompt rows are refreshed every `prompt_every` steps, response rows every `response_every` steps;
in between only the rows whose logits are read (the block's masked positions; for Dream the rows
before them) are computed. The first step is always full.
"""

from __future__ import annotations

from core.policies.base import CachePolicy, Plan, StepContext
from core.policies.params import Param
from core.policies.registry import register


@register("periodic")
class PeriodicCache(CachePolicy):
    parameters = (
        Param("prompt_every", int, 50, low=1, help="steps between refreshes of the prompt rows", ui=(1, 512)),
        Param("response_every", int, 5, low=1, help="steps between refreshes of the response rows", ui=(1, 512)),
    )
    prompt_every: int
    response_every: int

    def plan(self, ctx: StepContext) -> Plan:
        prompt = ctx.step % self.prompt_every == 0
        response = ctx.step % self.response_every == 0
        if prompt and response:
            return Plan(None, "full: both refresh intervals due")
        rows, why = set(ctx.block_masked), ["masked block rows"]
        if prompt:
            rows.update(range(0, ctx.prompt_len))
            why.append("prompt refresh")
        if response:
            rows.update(range(ctx.prompt_len, ctx.length))
            why.append("response refresh")
        return Plan(rows, "partial: " + " + ".join(why))  # the decoder sorts them
