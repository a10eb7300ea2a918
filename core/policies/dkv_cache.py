"""dKV-Cache, decode variant (horseee/dKV-Cache, generation_utils/llada_dkv_cache_decode.py).

A decoded token's K/V enter the cache one step late: the step after it is unmasked, its row is
computed once more with its real token, then reused. So every partial step computes every position
that was still masked when the previous step began, in all blocks, not only the current one. The
first two steps of each block and every `refresh_every`-th step of a block are full.
"""

from __future__ import annotations

from core.params import Param
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.policies.registry import register


@register("dkv-cache")
class DKVCache(CachePolicy):
    parameters = (
        Param("refresh_every", int, 8, low=1, help="steps of a block between full refreshes (cache_reloading_step)",
              ui=(1, 64)),
    )
    refresh_every: int

    def reset(self) -> None:
        self.last_unmasked: tuple[int, ...] = ()

    def plan(self, ctx: StepContext) -> Plan:
        if ctx.block_step < 2:
            return Plan(None, f"full: step {ctx.block_step} of the block")
        if ctx.block_step % self.refresh_every == 0:
            return Plan(None, f"full: every {self.refresh_every} steps of a block")
        settled = set(ctx.decode_order[: len(ctx.decode_order) - len(self.last_unmasked)])
        rows = [pos for pos in range(ctx.prompt_len, ctx.length) if pos not in settled]
        return Plan(rows, "partial: masked rows + last step's tokens, cached one step late")

    def observe(self, ctx: StepContext, outcome: Outcome) -> None:
        self.last_unmasked = outcome.unmasked
