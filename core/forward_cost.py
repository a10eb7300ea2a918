"""What one forward pass costs by the number of rows it computes: the floor under any cache's speedup.

A cache saves rows, but a pass over a few rows still multiplies every weight matrix in full and
launches the same kernels, so its cost does not fall in proportion. `python -m core bench
--forward-rows 601,18,2` prints these costs and the memory bandwidth the weights alone would need.
"""

from __future__ import annotations

import torch

from core.device import clock


def forward_costs(model, length: int, row_counts: list[int], repeats: int = 30) -> dict[int, float]:
    """Seconds per forward computing n rows of a cache of `length` positions, n in row_counts
    (n >= length means a full forward). Shows how far a partial pass is from costing n / length."""
    device = model.embed.weight.device
    ids = torch.randint(0, model.config.vocab_size, (1, length), device=device)
    cache = model.new_cache(1, length)
    out = {}
    with torch.no_grad():
        for n in row_counts:
            rows = None if n >= length else torch.arange(length - n, length, device=device)
            x = ids if rows is None else ids[:, rows]
            for _ in range(3):
                model(x, cache, rows, torch.tensor([length - 1], device=device))
            t0 = clock(device)  # core/device.py: the decoder's step clock
            for _ in range(repeats):
                model(x, cache, rows, torch.tensor([length - 1], device=device))
            out[n] = (clock(device) - t0) / repeats
    return out


def weight_bytes(model) -> int:
    """Bytes of weights every forward reads, however few rows it computes: all parameters but the
    input embedding table, of which a pass reads only its rows' entries (unless tied to the head).
    Divided by the time of a pass over a few rows, it is the memory bandwidth such a pass needs."""
    tied = model.lm_head.weight is model.embed.weight
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if tied or n != "embed.weight")



def pass_flops(cfg, rows: int, length: int, logit_rows: int) -> float:
    """Floating-point operations (a multiply-add is two) of a pass computing `rows` rows against a cache
    of `length` keys and reading `logit_rows` logits: its matmuls, attention's two products included;
    the pointwise work is negligible beside them. LLaDA-8B's full pass at 1000 + 256: 18.4 TFLOP."""
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    weights = cfg.dim * qkv + cfg.n_heads * cfg.head_dim * cfg.dim + 3 * cfg.dim * cfg.ffn_dim  # w13 is two
    attention = 2 * length * cfg.n_heads * cfg.head_dim  # q k^T, then p v
    return 2.0 * (cfg.n_layers * rows * (weights + attention) + logit_rows * cfg.dim * cfg.vocab_size)
