"""Fast-dLLM's block caches: a full forward at each block start, then a fixed set of rows.

dual: only the current block is recomputed; prompt and every other block are reused.
prefix: the current block and everything after it is recomputed; only the prefix is reused.
"""

from __future__ import annotations

from typing import ClassVar

from core.policies.base import CachePolicy, Plan, StepContext
from core.policies.registry import register


class BlockCache(CachePolicy):
    """Both caches: full at a block's first step, then the rows from the block's start on."""

    suffix: ClassVar[bool]  # whether a partial step recomputes the positions after the block too

    def plan(self, ctx: StepContext) -> Plan:
        if ctx.block_step == 0:
            return Plan(None, "full: first step of the block")
        if self.suffix:
            return Plan(list(range(ctx.block_start, ctx.length)), "partial: block + suffix")
        return Plan(list(range(ctx.block_start, ctx.block_end)), "partial: current block")


@register("dual")
class DualCache(BlockCache):
    suffix = False


@register("prefix")
class PrefixCache(BlockCache):
    suffix = True
