"""Fast-dLLM's block caches: a full forward at each block start, then a fixed set of rows.

dual: only the current block is recomputed; prompt and every other block are reused.
prefix: the current block and everything after it is recomputed; only the prefix is reused.
"""

from __future__ import annotations

from core.policies.base import CachePolicy, Plan, StepContext
from core.policies.registry import register


@register("dual")
class DualCache(CachePolicy):
    def plan(self, ctx: StepContext) -> Plan:
        if ctx.block_step == 0:
            return Plan(None, "full: first step of the block")
        return Plan(list(range(ctx.block_start, ctx.block_end)), "partial: current block")


@register("prefix")
class PrefixCache(CachePolicy):
    def plan(self, ctx: StepContext) -> Plan:
        if ctx.block_step == 0:
            return Plan(None, "full: first step of the block")
        return Plan(list(range(ctx.block_start, ctx.length)), "partial: block + suffix")
