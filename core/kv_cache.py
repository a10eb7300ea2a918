"""A preallocated per-layer KV cache covering every position of one sequence.

Keys are stored after RoPE: a row's rotation depends only on its position, which never changes
during a decode, so a reused row stays correctly rotated. Rows are written in place
(index_copy_), never concatenated, so a step costs no allocation.

Layer-wise caches (core/layerwise.py) also keep, per layer, each row's attention output and FFN
output (`outputs`), so a row skipped at a layer still moves through it: its residual stream adds the
outputs it had when last computed there (dLLM-Cache's feature cache). They are allocated on first use.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor]) -> None:
        self.k = k  # per layer: [batch, kv_heads, length, head_dim]
        self.v = v
        self.attn_out: list[torch.Tensor] = []  # per layer: [batch, length, dim], see `outputs`
        self.ffn_out: list[torch.Tensor] = []

    @classmethod
    def empty(
        cls,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        length: int,
        head_dim: int,
        dtype: torch.dtype,
        devices: list[torch.device] | torch.device,
    ) -> KVCache:
        if not isinstance(devices, list):
            devices = [devices] * n_layers
        shape = (batch, n_kv_heads, length, head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        v = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        return cls(k, v)

    @property
    def length(self) -> int:
        return self.k[0].shape[2]

    @property
    def n_layers(self) -> int:
        return len(self.k)

    def write(self, layer: int, rows: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store fresh K/V for `rows` (None: every row) of one layer."""
        if rows is None:
            self.k[layer].copy_(k)
            self.v[layer].copy_(v)
        else:
            self.k[layer].index_copy_(2, rows, k)
            self.v[layer].index_copy_(2, rows, v)


    def outputs(self, dim: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer attention- and FFN-output caches, [batch, length, dim], zeros until written."""
        if not self.attn_out:
            batch, length = self.k[0].shape[0], self.length
            self.attn_out = [torch.zeros(batch, length, dim, dtype=k.dtype, device=k.device) for k in self.k]
            self.ffn_out = [torch.zeros_like(a) for a in self.attn_out]
        return self.attn_out, self.ffn_out
