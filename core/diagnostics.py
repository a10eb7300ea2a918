"""Diagnostics behind the paper's two observations, measured on the model being shown.

1. Drift: how stale the cache is at the start of a step (its K/V against the K/V a full forward
   of the current tokens would give), per layer, as 1 - cosine and relative L2; set beside the
   max decoded-token entropy of the step before, which is what EntropyCache decides on. The cache
   is the decoding policy's own: under `none` drift is the change one step made, under a caching
   policy it is the staleness accumulated since the rows were last recomputed.
2. Volatility: how much a token's fresh K/V still changes from one step to the next, as a
   function of how many steps ago it was unmasked: the curve behind recomputing the k most recent.

`decode(..., probe=True)` fills the event fields these read; it costs one extra full forward per
step, which is kept out of the step's compute time.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from core.kv_cache import KVCache


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
