"""Check 1: one layer's attention as the model calls it, full and partial: which backend torch picks by
itself, and each backend's time alone."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from core.errors import error_line
from core.passes import bucket
from scripts.gpu_checks.shapes import BLOCK, K, seconds_per_call


def attention_backends(model, length: int, repeats: int) -> dict[str, dict]:
    """The attention of one layer as the model calls it (its layouts: queries a view of the fused q/k/v
    projection, keys and values the cache's), full (every row) and partial (48 rows, a bucket of block +
    k): which backend torch picks by itself, and the time of each backend alone ('refused' where it
    cannot run the call)."""
    cfg, device = model.config, model.embed.weight.device
    dtype, heads = model.embed.weight.dtype, cfg.n_heads + 2 * cfg.n_kv_heads
    cache = torch.randn(2, 1, cfg.n_kv_heads, length, cfg.head_dim, device=device, dtype=dtype)
    out = {}
    for name, rows in (("full", length), ("partial", bucket(BLOCK + K, length))):
        q = torch.randn(1, rows, heads, cfg.head_dim, device=device, dtype=dtype)[:, :, :cfg.n_heads].transpose(1, 2)
        call = partial(F.scaled_dot_product_attention, q, cache[0], cache[1], enable_gqa=cfg.n_heads != cfg.n_kv_heads)
        with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            call()
        ran = sorted({e.name for e in prof.events() if e.name.startswith("aten::_scaled_dot_product")})
        times = {}
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH):
            try:
                with torch.no_grad(), sdpa_kernel(backend):
                    times[backend.name.lower()] = seconds_per_call(call, device, repeats) * 1e3
            except RuntimeError as e:
                times[backend.name.lower()] = f"refused: {error_line(e)[:120]}"
        with torch.no_grad():
            default_ms = seconds_per_call(call, device, repeats) * 1e3
        out[name] = dict(rows=rows, default=ran, default_ms=default_ms, alone_ms=times)
    return out
