"""Elastic-Cache (arXiv 2510.14973; read through the fork yxu-dev/Elastic-Cache, llada/generate.py and
llada/model/modeling_llada.py): refresh the deeper layers once a tracked token's attention drifts.

The first step is full. Every later step computes, at every layer, the tracked tokens, the tokens
unmasked in the last step and a window of the first `window` masked positions. At each layer the
tracked tokens' attention is compared with what it was before this step: their cached queries
against the keys as they stood before this step's rows were written, versus their fresh queries
against the updated keys. The cosine runs across heads for each (tracked token, key) pair and is
averaged over all of them; below `gamma`, every row of every deeper layer is recomputed (the
failing layer itself is not). A layer's next tracked token is the decoded (or prompt) key its
window rows attend to most, summed over heads; the picks of all layers are tracked together.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.layerwise import LayerHook, LayerView
from core.params import Param
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.policies.registry import register


class DriftWatch(LayerHook):
    """One step of Elastic-Cache inside the forward. `active` None: the first step, every row."""

    stream = True

    def __init__(self, policy: ElasticCache, active: torch.Tensor | None, window: torch.Tensor,
                 tracked: torch.Tensor, masked: torch.Tensor) -> None:
        self.policy, self.active, self.window, self.tracked, self.masked = policy, active, window, tracked, masked
        self.full_from: int | None = 0 if active is None else None  # first layer computing every row
        self.picks: list[torch.Tensor] = []  # each layer's tracked-token choice for the next step
        self.reference: torch.Tensor | None = None

    def begin(self, n_layers: int, length: int, device: torch.device) -> None:
        super().begin(n_layers, length, device)
        self.window, self.tracked, self.masked = (t.to(device) for t in (self.window, self.tracked, self.masked))
        if self.active is not None:
            self.active = self.active.to(device)

    def rows(self, layer: int, view: LayerView) -> torch.Tensor | None:
        if self.full_from is not None and layer >= self.full_from:
            return None
        if self.tracked.numel():  # before this step's writes: the tracked tokens' attention as it was
            self.reference = view.probabilities(self.policy.queries[layer][:, :, self.tracked])
        return self.active

    def after(self, layer: int, view: LayerView) -> None:
        computed = self.active if self.full_from is None or layer < self.full_from else None
        rows = torch.arange(view.x.shape[1], device=view.x.device) if computed is None else computed
        q = view.queries(rows)
        self.policy.remember_queries(layer, rows, q)
        window_q = q[:, :, torch.searchsorted(rows, self.window)]
        scores = view.probabilities(window_q).sum(dim=(0, 1, 2))  # over batch, heads and window rows
        scores[self.masked] = 0.0
        self.picks.append(torch.topk(scores, self.policy.track_num).indices)
        if computed is not None and self.reference is not None:
            fresh = view.probabilities(q[:, :, torch.searchsorted(rows, self.tracked)])
            similarity = F.cosine_similarity(self.reference, fresh, dim=1).mean()
            if similarity < self.policy.gamma:
                self.full_from = layer + 1
                self.note = (f"tracked attention similarity {similarity:.3f} < gamma {self.policy.gamma:g} at "
                             f"layer {layer}: layers {layer + 1}+ recomputed in full")


def _positions(xs: list[int]) -> torch.Tensor:
    """Positions as an index tensor, on the CPU until DriftWatch.begin moves it to the model's device."""
    return torch.tensor(xs, dtype=torch.long)


@register("elastic")
class ElasticCache(CachePolicy):
    parameters = (
        Param("window", int, 32, low=1, help="masked positions computed at every step, from the left "
              "(with the current block's masked rows, which the decoder reads)", ui=(1, 256)),
        Param("gamma", float, 0.9, low=0.0, high=1.0, low_open=True, help="attention similarity below which "
              "the deeper layers are recomputed", ui=(0.05, 1.0)),
        Param("track_num", int, 1, low=1, help="most-attended tokens tracked per layer", ui=(1, 8)),
    )
    window: int
    gamma: float
    track_num: int

    def reset(self) -> None:
        self.queries: list[torch.Tensor] = []  # per layer: every row's query when it was last computed
        self.tracked: list[int] = []
        self.last_unmasked: tuple[int, ...] = ()
        self.watch: DriftWatch | None = None

    def remember_queries(self, layer: int, rows: torch.Tensor, q: torch.Tensor) -> None:
        if layer == len(self.queries):  # the first forward computes every row: allocate then
            self.queries.append(torch.empty_like(q))
        self.queries[layer].index_copy_(2, rows, q)

    def plan(self, ctx: StepContext) -> Plan:
        decoded = set(ctx.decode_order)
        masked = [pos for pos in range(ctx.block_start, ctx.length) if pos not in decoded]
        window = sorted({pos - ctx.logit_shift for pos in [*masked[: self.window], *ctx.block_masked]})
        first = not self.queries
        active = None if first else sorted({*self.tracked, *self.last_unmasked, *window})
        self.watch = DriftWatch(self, None if first else _positions(active), _positions(window),
                                _positions(self.tracked), _positions(masked))
        return Plan(None, "full: first step" if first else "partial: tracked + last decoded + window rows",
                    self.watch)

    def observe(self, ctx: StepContext, outcome: Outcome) -> None:
        self.tracked = torch.cat(self.watch.picks).unique().tolist()
        self.last_unmasked = outcome.unmasked
