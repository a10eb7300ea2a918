"""EntropyCache: recompute everything only after a step that decoded an uncertain token.

After each step, E = max over the tokens unmasked in it of the entropy of their predicted
distribution. E > tau means the cache has likely drifted: the next step is a full forward. Otherwise
the next step computes only the masked rows (`scope`: the current block's, or every masked position of
the response, as one published reading of the paper has it), every row unmasked in the last
step, and the k most recently decoded rows, whose features keep moving for a few steps after they
are unmasked. (With parallel decoding a step can unmask more than k tokens: each of them is
recomputed once with its real token, otherwise its cache row would keep the [MASK] K/V.) The first step of
every block is full. The decision costs O(vocab) per decoded token, nothing per layer or position.
"""

from __future__ import annotations

from core.params import Param
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.policies.registry import register

SCOPES = ("block", "response")  # which masked rows a partial step recomputes


@register("entropy")
class EntropyCache(CachePolicy):
    decides_by_entropy = True
    parameters = (
        Param("tau", float, 1.0, help="max decoded-token entropy (nats) above which the next step is full; "
              "0: after every step whose tokens had any entropy at all", ui=(0.0, 12.0)),
        Param("k", int, 2, low=0, help="most recently decoded rows recomputed at every partial step", ui=(0, 64)),
        Param("scope", str, SCOPES[0], choices=SCOPES, label="masked rows",
              help="the masked rows a partial step recomputes: the current block's, or the whole response's"),
    )
    tau: float
    k: int
    scope: str

    def reset(self) -> None:
        self.full_next = True
        self.last_entropy: float | None = None
        self.last_unmasked: tuple[int, ...] = ()

    def plan(self, ctx: StepContext) -> Plan:
        if ctx.block_step == 0:
            return Plan(None, "full: first step of the block")
        if self.last_entropy is None:
            return Plan(None, "full: nothing decoded yet")
        if self.full_next:
            return Plan(None, f"full: last step's max entropy {self.last_entropy:.3f} > tau {self.tau:g}")
        recent = ctx.decode_order[-self.k :] if self.k else []
        rows = set(self._masked(ctx)).union(self.last_unmasked, recent)  # the decoder sorts them
        return Plan(rows, f"partial: max entropy {self.last_entropy:.3f} <= tau {self.tau:g}")

    def _masked(self, ctx: StepContext) -> tuple[int, ...] | set[int]:
        if self.scope == "block":
            return ctx.block_masked
        decoded = set(ctx.decode_order)
        return {pos for pos in range(ctx.prompt_len, ctx.length) if pos not in decoded}

    def observe(self, ctx: StepContext, outcome: Outcome) -> None:
        e = max(outcome.entropies, default=0.0)
        self.last_entropy = e
        self.last_unmasked = outcome.unmasked
        self.full_next = e > self.tau
