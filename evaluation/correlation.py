"""Pearson and Spearman correlation of two equal-length lists, in float64: the Drift's links between a
step's entropy and what its decode moved (evaluation/diagnostics.py)."""

from __future__ import annotations

import math

import torch


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
