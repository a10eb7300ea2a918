"""d2Cache (Kamichanw/d2Cache, src/cache/d2cache.py): one full forward, then every step a row set
chosen at the end of the step before, the same at every layer.

The set for the next step is
1. up to `current_k` still-masked rows, ranked by confidence times certainty density (a Gaussian,
   `sigma` wide, over which response positions are decoded), rows of the current block first,
   searched from the block's first masked position to the end of the "block" that holds the
   current_k-th masked row, blocks sized by the current block's masked count, as d2Cache's code runs
   (its block mask is narrowed in place); for Dream the rows before them, row p-1 (the last prompt
   row) set after the nucleus, as there: chosen exactly when position p is;
2. every row unmasked in this step (computed once more with its real token);
3. the smallest set of the other rows holding a `rollout_p` share of global importance: the column
   sums of an attention rollout through every layer, built from the head-averaged attention of the
   rows each layer computed (rows a layer did not compute pass through it unchanged);
4. with `inflate_w` > 0, every row in a gap of at most inflate_w between two chosen rows.
There is no refresh after the first step. The confidence of step 1 is the one of the first (full)
forward, for the whole decode: the official code's update of it writes into a copy, through a mask
that operator precedence makes empty, so it never changes. We keep that behaviour (see
docs/ALGORITHM.md).
"""

from __future__ import annotations

import torch

from core.layerwise import LayerHook, LayerView
from core.params import Param
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.policies.registry import register


class RolloutProbe(LayerHook):
    """Collects each layer's head-averaged attention of the computed rows, and the first forward's confidence."""

    def __init__(self, logit_shift: int, response: range | None) -> None:
        self.logit_shift = logit_shift
        self.response = response  # positions whose confidence to read at the end; None: none
        self.attention: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: (rows, [rows, length])
        self.confidence: torch.Tensor | None = None

    def after(self, layer: int, view: LayerView) -> None:
        rows = view.positions if view.positions is not None else torch.arange(view.x.shape[1], device=view.x.device)
        self.attention.append((rows, view.attention(rows)[0].mean(dim=0)))

    def end(self, view: LayerView) -> None:
        if self.response is not None:
            source = torch.tensor(self.response, device=view.x.device) - self.logit_shift
            self.confidence = view.logits(source)[0].softmax(-1).max(-1).values

    def importance(self, length: int) -> torch.Tensor:
        """Column sums of the rollout M_last ... M_0, with M_l = identity but for the computed rows,
        whose rows are (attention + self) / 2. Computed as ones @ M_last @ ... @ M_0: each product
        touches only the computed rows, O(rows x length) per layer instead of a dense length^2."""
        v = torch.ones(length, device=self.attention[0][1].device)
        for rows, probs in reversed(self.attention):
            weight = v[rows]
            v[rows] *= 0.5
            v += 0.5 * (weight @ probs)
        return v


def certainty_density(decoded: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian-smoothed share of decoded neighbours for each response position. Left of the response
    counts as decoded (the prompt); right of it, as decoded only if the last position is."""
    g = decoded.numel()
    canvas = torch.cat([torch.ones(g), decoded.float(), torch.full((g,), float(decoded[-1]))])
    offsets = torch.arange(-g, g + 1, dtype=torch.float32)
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    smoothed = torch.nn.functional.conv1d(canvas[None, None], kernel[None, None])[0, 0]  # one per position
    return smoothed / kernel.sum()


def nucleus(scores: torch.Tensor, candidates: torch.Tensor, p: float) -> torch.Tensor:
    """The highest-scoring candidates whose normalised scores add up to at most p, at least one; at
    p = 1 every candidate (upstream compares the running sum with p alone, and rounding can take the
    sum of every normalised score past 1 and drop the last candidate)."""
    s = torch.where(candidates, scores, 0.0)
    ordered, order = torch.sort(s / (s.sum() + 1e-9), descending=True)
    keep = torch.cumsum(ordered, 0) <= p if p < 1 else torch.ones_like(ordered, dtype=torch.bool)
    keep[0] = True
    keep &= candidates[order]
    return order[keep]


def inflate(chosen: torch.Tensor, width: int) -> torch.Tensor:
    """Add every position lying in a gap of at most `width` between two chosen ones."""
    positions = chosen.nonzero().flatten()
    out = chosen.clone()
    for a, b in zip(positions[:-1].tolist(), positions[1:].tolist()):
        if b - a <= width:
            out[a:b] = True
    return out


@register("d2cache")
class D2Cache(CachePolicy):
    parameters = (
        Param("current_k", int, 32, low=1, help="masked rows kept active, by confidence x certainty density",
              ui=(1, 256)),
        Param("rollout_p", float, 0.1, low=0.0, high=1.0, help="share of attention-rollout importance whose rows "
              "are recomputed", ui=(0.0, 1.0)),
        Param("sigma", float, 10.0, low=0.0, low_open=True, help="width (positions) of the certainty density",
              ui=(0.5, 64.0)),
        Param("inflate_w", int, 4, low=0, help="fill gaps of at most this many positions between chosen rows",
              ui=(0, 32)),
    )
    current_k: int
    rollout_p: float
    sigma: float
    inflate_w: int

    def reset(self) -> None:
        self.next_rows: list[int] | None = None  # None: a full forward
        self.probe: RolloutProbe | None = None
        self.confidence: torch.Tensor | None = None  # the first forward's, frozen (see the module docstring)

    def plan(self, ctx: StepContext) -> Plan:
        first = self.confidence is None
        self.probe = RolloutProbe(ctx.logit_shift, range(ctx.prompt_len, ctx.length) if first else None)
        if self.next_rows is None:
            return Plan(None, "full: first step", self.probe)
        return Plan(self.next_rows, "partial: certain masked rows + decoded + rollout nucleus", self.probe)

    def observe(self, ctx: StepContext, outcome: Outcome) -> None:
        if self.confidence is None:
            self.confidence = self.probe.confidence.cpu()
        p = ctx.prompt_len
        decoded = set(ctx.decode_order).union(outcome.unmasked)
        remaining = torch.tensor([pos not in decoded for pos in range(p, ctx.length)])
        chosen = torch.zeros(ctx.length, dtype=torch.bool)
        certain = self._certain_masked(ctx, remaining)
        for pos in certain:  # the row its logits come from; Dream's first response position's, row p-1, below
            if pos - ctx.logit_shift >= p:
                chosen[pos - ctx.logit_shift] = True
        chosen[list(outcome.unmasked)] = True
        importance = self.probe.importance(ctx.length).cpu()
        chosen[nucleus(importance, ~chosen, self.rollout_p)] = True
        if ctx.logit_shift:  # as d2Cache sets it, after the nucleus: chosen exactly when position p is
            chosen[p - 1] = p in certain
        if self.inflate_w:
            chosen = inflate(chosen, self.inflate_w)
        self.next_rows = chosen.nonzero().flatten().tolist()

    def _certain_masked(self, ctx: StepContext, remaining: torch.Tensor) -> list[int]:
        """Up to current_k masked positions by frozen confidence x certainty density, the block's first."""
        g, p = remaining.numel(), ctx.prompt_len
        if not remaining.any():
            return []
        scores = self.confidence * certainty_density(~remaining, self.sigma)
        # d2Cache's block mask as its code runs: check_can_generate narrows it in place to the block's
        # positions still masked when the step began (src/generation/utils.py), so the window's "block
        # size" is that count and it starts at the first of them (docs/ALGORITHM.md says why we follow it).
        block = torch.zeros(g, dtype=torch.bool)
        block[[pos - p for pos in ctx.block_masked]] = True
        scores[block] += scores.max()
        size = len(ctx.block_masked)
        reach = torch.cumsum(remaining.int(), 0) >= self.current_k
        last = int(reach.int().argmax()) if reach.any() else g - 1
        search_end = min((last // size + 1) * size - 1, g - 1)  # "blocks" of that size from the response start
        index = torch.arange(g)
        search = (index >= ctx.block_masked[0] - p) & (index <= search_end) & remaining
        picked = torch.topk(torch.where(search, scores, -torch.inf), min(self.current_k, g)).indices
        return [p + i for i in picked.tolist() if search[i]]
