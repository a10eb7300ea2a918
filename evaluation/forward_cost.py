"""What one forward pass costs by the number of rows it computes: the floor under any cache's speedup.

A cache saves rows, but a pass over a few rows still multiplies every weight matrix in full and
launches the same kernels, so its cost does not fall in proportion. `python -m evaluation bench
--forward-rows 601,18,2` prints these costs and the memory bandwidth the weights alone would need.
A decode's own events say the same thing as it runs (TimeSplit): what its full and partial passes
cost, and so the most a cache could gain with its schedule of full and partial steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import torch

from core.device import clock, sync
from core.events import StepEvent
from core.exact_passes import Passes


def forward_costs(model, length: int, row_counts: list[int], repeats: int = 30,
                  logit_rows: int = 1) -> dict[int, float]:
    """Seconds per forward computing n rows of a cache of `length` positions, n in row_counts
    (n >= length means a full forward), reading the logits of the last `logit_rows` of them (a decode
    reads its block's masked rows), run as a decode runs them (core.exact_passes.Passes: eagerly, or compiled
    where the model's passes are). Shows how far a partial pass is from costing n / length."""
    device = model.embed.weight.device
    passes = Passes(model, length)
    out = {}
    with torch.no_grad():
        for n in row_counts:
            rows = None if n >= length else list(range(length - n, length))
            needed = list(range(length - min(logit_rows, n, length), length))
            for _ in range(3):  # the first compiles, where the passes are compiled
                passes.run(model, rows, needed)
            sync(device)
            t0 = clock(device)  # core/device.py: the decoder's step clock
            for _ in range(repeats):
                passes.run(model, rows, needed)
            out[n] = (clock(device) - t0) / repeats
    return out


def weight_bytes(model) -> int:
    """Bytes of weights every forward reads, however few rows it computes: all parameters but the
    input embedding table, of which a pass reads only its rows' entries (unless tied to the head).
    Divided by the time of a pass over a few rows, it is the memory bandwidth such a pass needs."""
    tied = model.lm_head.weight is model.embed.weight
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if tied or n != "embed.weight")


@cache
def copy_bandwidth(device: str, nbytes: int = 2**31) -> float:
    """Bytes per second a device-to-device copy of `nbytes` moves, counting bytes read and written:
    what streaming the weights could reach on this device. Measured once per device and size."""
    dev = torch.device(device)
    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    sync(dev)
    return 2 * a.numel() * a.element_size() * 10 / (time.perf_counter() - t0)


def weight_read_floor_s(model) -> float | None:
    """On a GPU, the seconds one pass needs just to read the weights once at the measured copy
    bandwidth (weight_bytes / copy_bandwidth): what no pass, however few rows, can beat at batch 1.
    None on the CPU, where a small pass is bound by its kernels, not by bandwidth (docs/BENCHMARKS.md)."""
    device = model.embed.weight.device
    if device.type != "cuda":
        return None
    return weight_bytes(model) / copy_bandwidth(str(device))


@dataclass(frozen=True)
class TimeSplit:
    """Where a decode's compute time went, from its events: full passes, partial passes, the token
    choice and the decision, which add up to its compute time (StepEvent.compute_s)."""

    full_passes: int
    full_s: float
    partial_passes: int
    partial_s: float
    partial_rows: float  # rows the partial passes computed, summed (per layer, on average over layers)
    choice_s: float
    decision_s: float

    @classmethod
    def of(cls, events: Sequence[StepEvent]) -> TimeSplit | None:
        """None when an event has no recorded pass time (a trace from before it was recorded)."""
        if any(e.forward_s is None or e.choice_s is None for e in events):
            return None
        full = [e for e in events if e.full]
        partial = [e for e in events if not e.full]
        return cls(len(full), sum(e.forward_s for e in full), len(partial), sum(e.forward_s for e in partial),
                   sum(sum(e.layer_rows) / len(e.layer_rows) for e in partial if e.layer_rows),
                   sum(e.choice_s for e in events), sum(e.decision_s for e in events))

    @property
    def steps(self) -> int:
        return self.full_passes + self.partial_passes

    @property
    def total_s(self) -> float:
        return self.full_s + self.partial_s + self.choice_s + self.decision_s

    def ceiling(self, full_pass_s: float) -> float | None:
        """The most this schedule of full and partial steps could gain over a decode that runs every one
        of its steps as a full pass, were each step only its pass: steps x F / (full x F + partial x P),
        F and P one full and one partial pass (F from any decode at this length, as a decode without a
        cache has many). None without a partial pass."""
        if not self.partial_passes or full_pass_s <= 0:
            return None
        return self.steps * full_pass_s / (self.full_passes * full_pass_s + self.partial_s)


def pass_flops(cfg, rows: int, length: int, logit_rows: int) -> float:
    """Floating-point operations (a multiply-add is two) of a pass computing `rows` rows against a cache
    of `length` keys and reading `logit_rows` logits: its matmuls, attention's two products included;
    the pointwise work is negligible beside them. LLaDA-8B's full pass at 1000 + 256: 18.4 TFLOP."""
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    weights = cfg.dim * qkv + cfg.n_heads * cfg.head_dim * cfg.dim + 3 * cfg.dim * cfg.ffn_dim  # w13 is two
    attention = 2 * length * cfg.n_heads * cfg.head_dim  # q k^T, then p v
    return 2.0 * (cfg.n_layers * rows * (weights + attention) + logit_rows * cfg.dim * cfg.vocab_size)


def gemm_rate(model, length: int, repeats: int = 20) -> float:
    """FLOP/s this device reaches now, on the model's widest product of a full pass at `length` rows
    (the FFN's gate and up projection), in the model's dtype and with the current thread count: the rate
    a large product runs at, so what the arithmetic floor divides by. Measured at each call."""
    cfg, weight = model.config, model.layers[0].ffn.w13.weight
    x = torch.randn(length, cfg.dim, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        for _ in range(3):
            torch.nn.functional.linear(x, weight)
        sync(weight.device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.linear(x, weight)
        sync(weight.device)
    return 2.0 * length * weight.shape[0] * weight.shape[1] * repeats / (time.perf_counter() - t0)


def arithmetic_floor_s(cfg, rows: int, length: int, logit_rows: int, rate: float) -> float:
    """The seconds a pass's arithmetic takes at `rate` FLOP/s (gemm_rate): what no pass in this dtype
    can beat, however little overhead it has. On a CPU a pass of a few rows is bound by this, not by
    reading its weights, which is why its floor is the larger of the two (docs/BENCHMARKS.md)."""
    return pass_flops(cfg, rows, length, logit_rows) / rate
