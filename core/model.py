"""A LLaMA-family transformer with bidirectional attention that computes a chosen subset of rows.

`forward(ids, cache, rows)` runs only the rows listed in `rows` (token ids `ids`, true positions
`rows`) through every layer. At each layer the fresh K/V of those rows overwrite their slots in the
cache, and their queries attend over the whole cache: fresh rows plus rows reused from earlier
steps. A full forward is the same call with rows=None. For most cache policies this is all they need:
which rows to pass is their whole decision.

A policy that decides layer by layer passes a LayerHook (core/layerwise.py): the forward calls it
at every layer, and with a stream hook every row moves through every layer while each layer
computes only the rows the hook names (`Block.forward_stream`).

Layout follows gpt-fast: q/k/v in one matmul (`wqkv`), gate and up in one (`w13`), so a partial
pass over few rows issues few kernels. A layer's pointwise parts (its two RMSNorms, RoPE, the residual
add before the FFN's norm, gate * up) are the functions of `POINTWISE`, which every block of a model
calls through one shared `Pointwise`: as written (eager), or compiled into fused kernels
(core/fusion.py). Attention is torch's scaled_dot_product_attention with no mask in a decode: a
row-selective pass attends over every cached key, so torch runs it on its fused kernels (cuDNN or
flash attention on a recent GPU; docs/ALGORITHM.md says which and why). On a CPU whose passes compile,
a pass over few rows runs in one call instead, from its ids to its logits (`pass_over_rows`,
core/few_rows.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from core.config import ModelConfig
from core.kv_cache import KVCache
from core.layerwise import LayerHook, LayerView


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalise in float32 like LLaDA and HF Llama do: bf16 variance is too coarse.
    y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return weight * y.to(x.dtype)


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual sum x + y, and its RMSNorm (one kernel where compiled)."""
    h = x + y
    return h, rms_norm(h, weight, eps)


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of w13's output, gate first."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def rope_tables(head_dim: int, length: int, theta: float, device: torch.device | None = None):
    """cos/sin for positions 0..length-1, rotate-half layout (as in LLaDA and HF Llama/Qwen2)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


# A layer's pointwise parts, by name: the one definition that both the eager and the fused path run.
POINTWISE = {"rms_norm": rms_norm, "add_rms_norm": add_rms_norm, "rope": apply_rope, "swiglu": swiglu}


class Pointwise:
    """The pointwise parts every block of one model calls (an attribute per name in POINTWISE): the
    functions themselves until core/fusion.py puts compiled ones in their place."""

    def __init__(self) -> None:
        self.use(POINTWISE)

    def use(self, parts: dict[str, Callable]) -> None:
        for name in POINTWISE:
            setattr(self, name, parts[name])


class PassOverRows(Protocol):
    """A whole pass in one call, ids to logits, for the passes it takes (core/few_rows.py's, on the CPU)."""

    def takes(self, rows: torch.Tensor | None, key_mask: torch.Tensor | None) -> bool: ...

    def __call__(self, ids: torch.Tensor, cache: KVCache, rows: torch.Tensor, logit_rows: torch.Tensor | None,
                 rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor: ...


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, ops: Pointwise) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Pointwise) -> None:
        super().__init__()
        self.ops = ops
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        qkv_out = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        self.wqkv = nn.Linear(cfg.dim, qkv_out, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotated queries of x's rows, [batch, heads, rows, head_dim] (for attention probes)."""
        q_out = self.n_heads * self.head_dim
        q = F.linear(x, self.wqkv.weight[:q_out], None if self.wqkv.bias is None else self.wqkv.bias[:q_out])
        return self.ops.rope(q.view(*x.shape[:2], self.n_heads, self.head_dim), cos, sin).transpose(1, 2)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """V of x's rows, [batch, kv_heads, rows, head_dim], without their queries and keys."""
        v_out = self.n_kv_heads * self.head_dim
        bias = None if self.wqkv.bias is None else self.wqkv.bias[-v_out:]
        return F.linear(x, self.wqkv.weight[-v_out:], bias).view(*x.shape[:2], self.n_kv_heads, -1).transpose(1, 2)

    def forward(self, x, cos, sin, cache: KVCache, layer: int, rows, key_mask):
        b, r, _ = x.shape
        n_qk = self.n_heads + self.n_kv_heads
        qkv = self.wqkv(x).view(b, r, n_qk + self.n_kv_heads, self.head_dim)
        # One rotation for queries and keys together: half the kernels of rotating each.
        q, k = self.ops.rope(qkv[:, :, :n_qk], cos, sin).transpose(1, 2).split([self.n_heads, self.n_kv_heads], dim=1)
        v = qkv[:, :, n_qk:].transpose(1, 2)
        cache.write(layer, rows, k, v)
        y = F.scaled_dot_product_attention(
            q, cache.k[layer], cache.v[layer], attn_mask=key_mask, enable_gqa=self.n_heads != self.n_kv_heads
        )
        return self.wo(y.transpose(1, 2).reshape(b, r, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Pointwise) -> None:
        super().__init__()
        self.w13 = nn.Linear(cfg.dim, 2 * cfg.ffn_dim, bias=False)  # gate then up
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.ops.swiglu(self.w13(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, ops: Pointwise) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps, ops)
        self.attn = Attention(cfg, ops)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps, ops)
        self.ffn = FeedForward(cfg, ops)
        self.ops = ops

    def forward(self, x, cos, sin, cache, layer, rows, key_mask):
        attn_out = self.attn(self.attn_norm(x), cos, sin, cache, layer, rows, key_mask)
        x, normed = self.ops.add_rms_norm(x, attn_out, self.ffn_norm.weight, self.ffn_norm.eps)
        return x + self.ffn(normed)

    def forward_stream(self, x, cos, sin, cache: KVCache, layer: int, rows: torch.Tensor | None):
        """x holds every row; only `rows` (None: all) are computed. Every row adds this layer's cached
        attention and FFN outputs, just refreshed for the computed ones."""
        attn_out, ffn_out = (outs[layer] for outs in cache.outputs(x.shape[-1]))
        if rows is None:
            attn_out.copy_(self.attn(self.attn_norm(x), cos, sin, cache, layer, None, None))
            h = x + attn_out
            ffn_out.copy_(self.ffn(self.ffn_norm(h)))
            return h + ffn_out
        if rows.numel():
            fresh = self.attn(self.attn_norm(x[:, rows]), cos[rows], sin[rows], cache, layer, rows, None)
            attn_out.index_copy_(1, rows, fresh)
        h = x + attn_out
        if rows.numel():
            ffn_out.index_copy_(1, rows, self.ffn(self.ffn_norm(h[:, rows])))
        return h + ffn_out


class DiffusionTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.pointwise = Pointwise()  # shared by every block (core/fusion.py may compile its parts)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, self.pointwise) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps, self.pointwise)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        # The passes it takes in one call, in place of the embedding, the blocks' loop and the head below
        # (core/few_rows.py sets it where the passes compile on a CPU; None: the modules, always).
        self.pass_over_rows: PassOverRows | None = None

    def new_cache(self, batch: int, length: int) -> KVCache:
        """An empty cache for `length` positions, each layer's on that layer's device."""
        cfg = self.config
        devices = [blk.attn.wqkv.weight.device for blk in self.layers]
        dtype = self.layers[0].attn.wqkv.weight.dtype
        return KVCache.empty(cfg.n_layers, batch, cfg.n_kv_heads, length, cfg.head_dim, dtype, devices)

    def reserve_rope(self, length: int, device: torch.device) -> None:
        """Build the RoPE tables for at least `length` positions on `device`, if they are not there:
        sized by the cache's length, not by the positions a pass computes (their max would need a
        device sync), and built outside any pass that a CUDA graph captures, which must keep reading
        the same tables."""
        if self._rope is None or self._rope[0].shape[0] < length or self._rope[0].device != device:
            size = max(length, min(self.config.max_seq_len, 4096))
            self._rope = rope_tables(self.config.head_dim, size, self.config.rope_theta, device)

    def _rope_at(self, positions: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin at `positions`, all below the cache's `length`."""
        self.reserve_rope(length, positions.device)
        cos, sin = self._rope
        return cos[positions], sin[positions]

    def forward(
        self,
        ids: torch.Tensor,
        cache: KVCache,
        rows: torch.Tensor | None = None,
        logit_rows: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        hook: LayerHook | None = None,
    ) -> torch.Tensor:
        """Run rows through the model against `cache`; return logits.

        ids: [batch, R] token ids of the rows computed (all cache.length rows when rows is None).
        rows: [R] sorted true positions of those rows, or None for a full forward.
        logit_rows: positions (a subset of rows) whose logits are wanted; None: every computed row.
        key_mask: optional [batch, length] bool, False for padding keys (training batches).
        hook: a policy's per-layer part (core/layerwise.py); a stream hook needs rows=None.
        Returns logits [batch, len(logit_rows) or R, vocab] in float32.
        """
        length = cache.length
        if rows is None:
            if ids.shape[1] != length:
                raise ValueError(f"full forward needs {length} ids, got {ids.shape[1]}")
            positions = torch.arange(length, device=ids.device)
        else:
            if ids.shape[1] != rows.numel():
                raise ValueError(f"{ids.shape[1]} ids for {rows.numel()} rows")
            positions = rows
            if hook is None and self.pass_over_rows is not None and self.pass_over_rows.takes(rows, key_mask):
                self.reserve_rope(length, ids.device)
                return self.pass_over_rows(ids, cache, rows, logit_rows, self._rope)
        cos, sin = self._rope_at(positions, length)
        cos, sin = cos[:, None], sin[:, None]  # [rows, 1, head_dim]: broadcast over heads
        mask = None if key_mask is None else key_mask[:, None, None, :]
        x = self.embed(ids)
        if hook is not None:
            hook.begin(len(self.layers), length, ids.device)
        if hook is not None and hook.stream:
            if rows is not None:
                raise ValueError("a stream hook chooses rows per layer: call with rows=None")
            for i, layer in enumerate(self.layers):
                view = LayerView(layer, cache, i, x, None, cos, sin)
                x = layer.forward_stream(x, cos, sin, cache, i, hook.choose(i, view))
                hook.finish(i, view)
        else:
            for i, layer in enumerate(self.layers):
                x_in, x = x, layer(x, cos, sin, cache, i, rows, mask)
                if hook is not None:
                    hook.ran(i, rows)
                    hook.finish(i, LayerView(layer, cache, i, x_in, rows, cos, sin))
        if hook is not None:
            hook.close(LayerView(None, cache, len(self.layers), x, rows, cos, sin, self._head))
        if logit_rows is not None:
            index = logit_rows if rows is None else torch.searchsorted(rows, logit_rows)
            x = x[:, index]
        return self._head(x)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x)).float()

    def full_logits(self, ids: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Plain bidirectional forward over a whole batch of sequences (training, parity tests)."""
        cache = self.new_cache(ids.shape[0], ids.shape[1])
        return self.forward(ids, cache, key_mask=key_mask)
