"""dLLM-Cache (maomaocun/dLLM-cache): long refresh intervals, and in between, per layer, the response
rows whose value vectors moved most.

Prompt rows are recomputed every `prompt_every` steps and response rows every `response_every`
steps (the global step count, not reset per block). Layer 0 always recomputes every row. At the
other layers of a step that refreshes neither, the layer computes V for every response row from its
current input, overwrites their cached V, and recomputes (queries, keys, attention, FFN) only the
`rho` share of them whose V has the lowest cosine similarity to the V cached before. Every row moves
through every layer: a row that is not recomputed adds the attention and FFN outputs it had when
last computed (a stream hook, core/layerwise.py). The block's masked rows get no special treatment:
their logits come out of that stream like every other row's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from core.layerwise import LayerHook, LayerView
from core.params import Param
from core.policies.base import CachePolicy, Plan, StepContext
from core.policies.registry import register


class ValueDriftRows(LayerHook):
    """One step's per-layer choice: every row, the refreshed groups, or the rows whose V moved most."""

    stream = True

    def __init__(self, prompt_len: int, length: int, refresh_prompt: bool, refresh_response: bool, rho: float):
        self.prompt_len, self.length, self.rho = prompt_len, length, rho
        self.refresh_prompt, self.refresh_response = refresh_prompt, refresh_response

    def rows(self, layer: int, view: LayerView) -> torch.Tensor | None:
        if layer == 0 or (self.refresh_prompt and self.refresh_response):
            return None
        device = view.x.device
        response = torch.arange(self.prompt_len, self.length, device=device)
        if self.refresh_response:
            return response
        chosen = self.most_changed(view, response)
        if self.refresh_prompt:
            return torch.cat([torch.arange(self.prompt_len, device=device), chosen])
        return chosen

    def most_changed(self, view: LayerView, response: torch.Tensor) -> torch.Tensor:
        """The rho share of response rows whose fresh V is least like their cached V (sorted); every
        response row's cached V is then overwritten with the fresh one, as the official hook does."""
        fresh = view.fresh_values(response)
        similarity = F.cosine_similarity(_per_row(fresh), _per_row(view.cached_values(response)), dim=-1)[0]
        view.store_values(response, fresh)
        n = math.floor(response.numel() * self.rho + 1e-9)  # the share's floor: 100 x 0.29 is 28.999999999999996
        picked = torch.topk(similarity, n, largest=False).indices
        return response[picked.sort().values]


def _per_row(v: torch.Tensor) -> torch.Tensor:
    """[batch, kv_heads, rows, head_dim] -> [batch, rows, kv_heads * head_dim]: one vector per row."""
    return v.transpose(1, 2).flatten(2).float()


@register("dllm-cache")
class DLLMCache(CachePolicy):
    parameters = (
        Param("prompt_every", int, 50, low=1, help="Kp: steps between recomputations of the prompt rows",
              ui=(1, 256)),
        Param("response_every", int, 7, low=1, help="Kr: steps between recomputations of the response rows",
              ui=(1, 256)),
        Param("rho", float, 0.25, low=0.0, high=1.0, low_open=True,
              help="share of response rows recomputed at each layer between refreshes: those whose V changed most",
              ui=(0.05, 1.0)),
    )
    prompt_every: int
    response_every: int
    rho: float

    def plan(self, ctx: StepContext) -> Plan:
        prompt = ctx.step % self.prompt_every == 0
        response = ctx.step % self.response_every == 0
        if prompt and response:
            why = "full: both refresh intervals due"
        elif response:
            why = "partial: response rows refreshed, prompt reused"
        else:
            share = f"{self.rho:.0%} of response rows by V change, per layer"
            why = f"partial: prompt refreshed + {share}" if prompt else f"partial: {share}"
        return Plan(None, why, ValueDriftRows(ctx.prompt_len, ctx.length, prompt, response, self.rho))
