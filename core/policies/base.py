"""What a cache policy sees and says.

The decoder asks the policy, before each step, which rows to compute (`plan`), and tells it, after
the step, what was unmasked and how uncertain it was (`observe`). A policy never touches the model
or the cache, so a new one is a small class registered by name: the decoder does not change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepContext:
    step: int  # global step index, from 0
    block: int  # index of the current block
    block_step: int  # step index inside the current block, from 0
    block_start: int  # absolute position of the block's first token
    block_end: int  # one past its last
    prompt_len: int
    length: int  # prompt + generation
    masked: torch.Tensor  # [length] bool: still masked
    decoded_at: torch.Tensor  # [length] long: step at which a position was unmasked, -1 if never (prompt, masks)


@dataclass(frozen=True)
class Plan:
    rows: torch.Tensor | None  # sorted positions to compute; None = every row (full forward)
    reason: str  # one short phrase, shown to people


@dataclass(frozen=True)
class Outcome:
    unmasked: torch.Tensor  # positions unmasked in this step
    entropies: torch.Tensor  # Shannon entropy (nats) of each one's predicted distribution


class CachePolicy:
    """Base class: every step a full forward. Subclasses override `plan` and maybe `observe`."""

    name = "base"

    def reset(self) -> None:
        """Called once before a decode starts."""

    def plan(self, ctx: StepContext) -> Plan:
        return Plan(None, "full")

    def observe(self, ctx: StepContext, outcome: Outcome) -> None:
        """Called after each step with what it unmasked."""

    def params(self) -> dict:
        return {}

    def describe(self) -> str:
        p = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({p})" if p else self.name


def positions(mask: torch.Tensor) -> torch.Tensor:
    return mask.nonzero().flatten()


def block_rows(ctx: StepContext) -> torch.Tensor:
    return torch.arange(ctx.block_start, ctx.block_end, device=ctx.masked.device)


def masked_in_block(ctx: StepContext) -> torch.Tensor:
    return positions(ctx.masked[ctx.block_start : ctx.block_end]) + ctx.block_start


def most_recent(ctx: StepContext, k: int) -> torch.Tensor:
    """Positions of the k most recently unmasked tokens (ties: later steps first, then position)."""
    if k <= 0:
        return ctx.decoded_at.new_empty(0)
    done = positions(ctx.decoded_at >= 0)
    if done.numel() == 0:
        return done
    order = torch.argsort(ctx.decoded_at[done], descending=True, stable=True)
    return done[order[:k]]
