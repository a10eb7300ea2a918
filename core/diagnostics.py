"""Diagnostics behind the paper's two observations, measured on the model being shown.

1. Drift: how stale the cache is at the start of a step (its K/V against the K/V a full forward
   of the current tokens would give), per layer, as 1 - cosine and relative L2; set beside the
   max decoded-token entropy of the step before, which is what EntropyCache decides on. The cache
   is the decoding policy's own: under `none` drift is the change one step made, under a caching
   policy it is the staleness accumulated since the rows were last recomputed.
2. Volatility: how much a token's fresh K/V still changes from one step to the next, as a
   function of how many steps ago it was unmasked: the curve behind recomputing the k most recent.

`decode(..., before_step=Probe(model))` fills the event fields these read; it costs one extra full
forward per step, which runs before the step's timing starts and so is not in its compute time.
`drift_report` pools both over many problems (`python -m core bench --drift`).
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from core.decoder import DecodeConfig, decode
from core.kv_cache import KVCache
from core.loading import chat_prompt_ids
from core.model import DiffusionTransformer
from core.policies import StepContext, make_policy


class Probe:
    """A decode hook: fresh K/V of every row at the start of each step, against the cache (drift) and
    against the fresh K/V of the step before (volatility). One per decode."""

    def __init__(self, model: DiffusionTransformer) -> None:
        self.model = model
        self.previous: KVCache | None = None
        self.seen: torch.Tensor | None = None  # the tokens at the previous call
        self.unmasked_at: dict[int, int] = {}

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, cache: KVCache, ctx: StepContext) -> dict:
        if self.seen is not None:  # positions unmasked since the last call were unmasked by the step before
            mask_id = self.model.config.mask_token_id
            for pos in ((self.seen == mask_id) & (x != mask_id)).nonzero().flatten().tolist():
                self.unmasked_at[pos] = ctx.step - 1
        self.seen = x.clone()
        fresh = self.model.new_cache(1, cache.length)
        self.model(x[None], fresh, None, x.new_zeros(1))  # K/V of every row; one logit row, unused
        out = {}
        if ctx.step > 0:  # before the first step there is no cache to be stale
            out["drift_cos"], out["drift_l2"] = kv_drift(cache, fresh)
        if self.previous is not None:
            change = row_change(self.previous, fresh).tolist()
            out["volatility"] = [[ctx.step - s, change[pos]] for pos, s in sorted(self.unmasked_at.items())]
        self.previous = fresh
        return out


def kv_drift(stale: KVCache, fresh: KVCache) -> tuple[list[float], list[float]]:
    """Per layer: mean over rows of 1 - cosine(stale row, fresh row), and ||stale - fresh|| / ||fresh||.

    A row is a position's keys and values of all heads, concatenated."""
    cos, l2 = [], []
    for layer in range(fresh.n_layers):
        s, f = _rows(stale, layer), _rows(fresh, layer)
        cos.append(float((1 - torch.nn.functional.cosine_similarity(s, f, dim=-1)).mean()))
        l2.append(float((s - f).norm() / f.norm().clamp_min(1e-12)))
    return cos, l2


def row_change(previous: KVCache, current: KVCache) -> torch.Tensor:
    """Per position: relative L2 change of its K/V between two caches, averaged over layers."""
    changes = []
    for layer in range(current.n_layers):
        p, c = _rows(previous, layer), _rows(current, layer)
        changes.append(
            ((c - p).norm(dim=-1) / p.norm(dim=-1).clamp_min(1e-12)).cpu()
        )  # layers may sit on several devices
    return torch.stack(changes).mean(dim=0)


def _rows(cache: KVCache, layer: int) -> torch.Tensor:
    """[length, 2 * heads * head_dim] float32 rows of one layer (batch 0)."""
    k, v = cache.k[layer][0], cache.v[layer][0]  # [heads, length, head_dim]
    return torch.cat([k, v], dim=0).transpose(0, 1).reshape(k.shape[1], -1).float()


def pearson(x: list[float], y: list[float]) -> float:
    """Pearson correlation; NaN when either side is constant or there are fewer than 2 points."""
    if len(x) != len(y):
        raise ValueError(f"pearson needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return math.nan
    a, b = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    a, b = a - a.mean(), b - b.mean()
    denom = a.norm() * b.norm()
    return float((a * b).sum() / denom) if denom > 0 else math.nan


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman rank correlation (ties get their average rank)."""
    return pearson(_ranks(x), _ranks(y))


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2
        i = j + 1
    return ranks


def drift_vs_entropy(events: list) -> dict:
    """Pairs (max entropy decoded at step t-1, mean drift over layers at the start of step t)."""
    entropy, cos, l2 = [], [], []
    for before, event in zip(events, events[1:]):
        if event.drift_cos is None:
            continue
        entropy.append(before.max_entropy)
        cos.append(sum(event.drift_cos) / len(event.drift_cos))
        l2.append(sum(event.drift_l2) / len(event.drift_l2))
    return {
        "entropy": entropy,
        "drift_cos": cos,
        "drift_l2": l2,
        "pearson_cos": pearson(entropy, cos),
        "spearman_cos": spearman(entropy, cos),
        "pearson_l2": pearson(entropy, l2),
        "spearman_l2": spearman(entropy, l2),
    }


def volatility_curve(events: list) -> dict[int, float]:
    """Mean K/V change from one step to the next, by steps since the token was unmasked."""
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for event in events:
        for age, change in event.volatility or []:
            sums[int(age)] += change
            counts[int(age)] += 1
    return {age: sums[age] / counts[age] for age in sorted(sums)}


def drift_report(model, tokenizer, prompts: list[str], policy: str, params: dict, config: DecodeConfig) -> dict:
    """Observations 1 and 2 pooled over prompts, each decoded by `policy` with a Probe: the
    entropy-vs-drift correlations and the volatility curve."""
    events_all, pairs = [], {"entropy": [], "drift_cos": [], "drift_l2": []}
    for prompt in prompts:
        ids = chat_prompt_ids(tokenizer, prompt)
        events = list(decode(model, ids, make_policy(policy, **params), config, before_step=Probe(model)))
        one = drift_vs_entropy(events)
        for key in pairs:
            pairs[key] += one[key]
        events_all += events
    return {
        "n_pairs": len(pairs["entropy"]),
        "pearson_cos": pearson(pairs["entropy"], pairs["drift_cos"]),
        "spearman_cos": spearman(pairs["entropy"], pairs["drift_cos"]),
        "pearson_l2": pearson(pairs["entropy"], pairs["drift_l2"]),
        "spearman_l2": spearman(pairs["entropy"], pairs["drift_l2"]),
        "volatility": volatility_curve(events_all),
    }
