"""dLLM-Cache's schedule without its value-similarity check.

Prompt rows are refreshed every `prompt_every` steps, response rows every `response_every` steps;
in between only the rows whose logits are read (the block's masked positions; for Dream the rows
before them) are computed. The first step is always full.
"""

from __future__ import annotations

from core.policies.base import CachePolicy, Plan, StepContext
from core.policies.registry import register


@register("periodic")
class PeriodicCache(CachePolicy):
    name = "periodic"

    def __init__(self, prompt_every: int = 50, response_every: int = 5) -> None:
        for label, n in (("prompt_every", prompt_every), ("response_every", response_every)):
            if int(n) != n or n < 1:
                raise ValueError(f"{label} must be a positive integer, got {n}")
        self.prompt_every, self.response_every = int(prompt_every), int(response_every)

    def params(self) -> dict:
        return {"prompt_every": self.prompt_every, "response_every": self.response_every}

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
