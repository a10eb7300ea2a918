"""Checks 2 and 3: one pass at each shape, full and partial, today's path (fusion off) eager and graphed
and the fused path graphed, against the card's peak and the weight-read floor; and the fused graphed
pass's time by rows computed."""

from __future__ import annotations

import time

import torch

from core.fusion import set_fusion
from core.passes import ROW_BUCKETS, passes_for, release_graphs
from evaluation.forward_cost import forward_costs, pass_flops, weight_bytes
from scripts.gpu_checks.shapes import BLOCK, K, seconds_per_call


def graphed_costs(model, length: int, row_counts: list[int], repeats: int) -> dict[int, float]:
    """Seconds of a pass computing each of `row_counts` rows (the sequence's last ones; >= length: the
    full pass), reading the last block's logits, replayed from its CUDA graph (on a CPU: the same
    padded pass, eagerly)."""
    needed = list(range(length - BLOCK, length))
    out = {}
    with torch.no_grad(), passes_for(model, length, BLOCK, "on") as ws:
        ws.start(torch.randint(0, model.config.mask_token_id, (length - BLOCK,)).tolist())
        for n in row_counts:
            rows = None if n >= length else list(range(length - n, length))
            out[n] = seconds_per_call(lambda rows=rows: ws.run(model, rows, needed), ws.device, repeats)
    return out


def forward_part(model, lengths, bytes_per_s: float, repeats: int, peak_tflops: float | None) -> list[dict]:
    """Today's passes (fusion off): full and partial (block + k rows) at each length, eager and graphed,
    beside the weight-read floor. `fused_part` adds the fused ones to these rows."""
    set_fusion(model, "off")
    floor_s = weight_bytes(model) / bytes_per_s
    out = []
    for prompt, gen in lengths:
        length = prompt + gen
        eager = forward_costs(model, length, [length, BLOCK + K], repeats=repeats)
        graphed = graphed_costs(model, length, [length, BLOCK + K], repeats)
        out.append(dict(prompt=prompt, gen=gen, floor_ms=floor_s * 1e3,
                        eager_full_ms=eager[length] * 1e3, eager_partial_ms=eager[BLOCK + K] * 1e3,
                        unfused_full_ms=graphed[length] * 1e3, unfused_partial_ms=graphed[BLOCK + K] * 1e3,
                        **pass_rates(model, length, graphed[length], graphed[BLOCK + K], bytes_per_s, peak_tflops,
                                     "unfused_")))
    release_graphs(model)
    return out


def fused_part(model, forward: list[dict], bytes_per_s: float, repeats: int, peak_tflops: float | None,
               backend: str) -> float:
    """The fused passes (fusion on, compiled by torch.compile's `backend`), graphed, added to `forward`'s
    rows; returns the seconds the first full and partial passes took, compiling."""
    set_fusion(model, "on", backend=backend)
    first = forward[0]["prompt"] + forward[0]["gen"]
    t0 = time.perf_counter()
    forward_costs(model, first, [first, BLOCK + K, BLOCK + K + 1], repeats=1)  # compiled: static, then dynamic
    compile_s = time.perf_counter() - t0
    for r in forward:
        length = r["prompt"] + r["gen"]
        graphed = graphed_costs(model, length, [length, BLOCK + K], repeats)
        r.update(fused_full_ms=graphed[length] * 1e3, fused_partial_ms=graphed[BLOCK + K] * 1e3,
                 **pass_rates(model, length, graphed[length], graphed[BLOCK + K], bytes_per_s, peak_tflops, "fused_"))
    release_graphs(model)
    return compile_s


def pass_rates(model, length: int, full_s: float, partial_s: float, bytes_per_s: float, peak_tflops: float | None,
               prefix: str) -> dict:
    """What a full pass achieves in TFLOPS (and of the card's peak) and a partial one in GB/s of weights
    read (and over the floor of reading them at the copy bandwidth), with the partial / full ratio."""
    full_tflops = pass_flops(model.config, length, length, BLOCK) / full_s / 1e12
    weights = weight_bytes(model)
    return {f"{prefix}full_tflops": full_tflops,
            f"{prefix}full_of_peak": full_tflops / peak_tflops if peak_tflops else None,
            f"{prefix}partial_gb_s": weights / partial_s / 1e9,
            f"{prefix}partial_over_floor": partial_s / (weights / bytes_per_s),
            f"{prefix}partial_share": partial_s / full_s}


def rows_curve(model, length: int, bytes_per_s: float, repeats: int) -> list[dict]:
    """The graphed pass's time against the rows it computes, from 8 to the full pass (every bucket of
    core/passes.py on the way): where it leaves the weight floor and becomes compute-bound."""
    counts = [b for b in ROW_BUCKETS if b < length] + [length]
    costs = graphed_costs(model, length, counts, repeats)
    floor_s = weight_bytes(model) / bytes_per_s
    release_graphs(model)
    return [dict(rows=n, ms=s * 1e3, over_floor=s / floor_s,
                 tflops=pass_flops(model.config, n, length, BLOCK) / s / 1e12) for n, s in costs.items()]
