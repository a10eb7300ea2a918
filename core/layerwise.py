"""Layer-wise plans: a policy that chooses rows per layer, or reads a signal inside the forward.

Most policies name one set of rows for every layer (Plan.rows). Some of the peers decide inside the
forward, layer by layer: dLLM-Cache computes, at each layer, the fresh V of every response row and
recomputes only the rows whose V moved most; Elastic-Cache watches a tracked token's attention at
each layer and refreshes every row of the deeper layers once it drifts; d2Cache reads the attention
of its active rows to rank the others for the next step. Such a policy returns a LayerHook in its
Plan, and the model calls it at every layer:

- `rows(layer, view)`, before the layer, in a stream forward only (`stream = True`): the rows this
  layer computes, a sorted int64 tensor of positions, or None for every row;
- `after(layer, view)`, once the layer has written its K/V;
- `end(view)`, once after the last layer, with the final hidden states (view.logits works there).

In a stream forward every row of the sequence moves through every layer, and a row skipped at a
layer adds the attention and FFN outputs it had when last computed there (KVCache.outputs), as
dLLM-Cache's feature cache does; the first stream forward of a decode must compute every row.
Without `stream` the forward computes Plan.rows at every layer as usual and only calls `after`.

Everything a hook does is decision work: the model times both calls, on the step clock
(core/device.py), into `signal_s`, and records how many rows each layer computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F

from core.device import clock
from core.kv_cache import KVCache


class LayerView:
    """What a hook may read at one layer: the layer's input rows and the signals derived from them."""

    def __init__(self, block, cache: KVCache, layer: int, x: torch.Tensor, positions: torch.Tensor | None,
                 cos: torch.Tensor, sin: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 ) -> None:
        self.block, self.cache, self.layer = block, cache, layer
        self.x = x  # [batch, rows, dim], the layer's input (at the end: the final hidden states)
        self.positions = positions  # the true positions of x's rows; None: every position, in order
        self.cos, self.sin = cos, sin  # RoPE tables for x's rows, [rows, 1, head_dim]
        self.head = head  # final norm + LM head, given only to the view at the end of the forward

    def _index(self, rows: torch.Tensor) -> torch.Tensor:
        return rows if self.positions is None else torch.searchsorted(self.positions, rows)

    def fresh_values(self, rows: torch.Tensor) -> torch.Tensor:
        """V of `rows` from this layer's input, [batch, kv_heads, len(rows), head_dim]."""
        return self.block.attn.values(self.block.attn_norm(self.x[:, self._index(rows)]))

    def cached_values(self, rows: torch.Tensor) -> torch.Tensor:
        return self.cache.v[self.layer][:, :, rows]

    def store_values(self, rows: torch.Tensor, v: torch.Tensor) -> None:
        self.cache.v[self.layer].index_copy_(2, rows, v)

    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Float32 logits of `rows` from the final hidden states, [batch, len(rows), vocab] (end view only)."""
        return self.head(self.x[:, self._index(rows)])

    def queries(self, rows: torch.Tensor) -> torch.Tensor:
        """Rotated queries of `rows` from this layer's input, [batch, heads, len(rows), head_dim]."""
        index = self._index(rows)
        return self.block.attn.queries(self.block.attn_norm(self.x[:, index]), self.cos[index], self.sin[index])

    def attention(self, rows: torch.Tensor) -> torch.Tensor:
        """Attention probabilities of `rows`' queries over every cached key, [batch, heads, len(rows), length].
        scaled_dot_product_attention does not return them, so they are computed again here."""
        return self.probabilities(self.queries(rows))

    def probabilities(self, q: torch.Tensor) -> torch.Tensor:
        """softmax(q K^T / sqrt(d)) in float32 against this layer's cached keys as they are now."""
        k = self.cache.k[self.layer]
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # grouped-query heads share a key head
        return F.softmax((q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1]), dim=-1)


class LayerHook:
    """Base class of a policy's per-layer part; by default it changes nothing."""

    stream: ClassVar[bool] = False

    def begin(self, n_layers: int, length: int, device: torch.device) -> None:
        """Called by the model at the start of each forward."""
        self.layer_rows = [0] * n_layers
        self.note = ""  # what the hook found, shown after the plan's reason (e.g. which layer drifted)
        self.computed = torch.zeros(length, dtype=torch.bool, device=device)  # rows computed at any layer
        self.signal_s = 0.0
        self._device = device

    def rows(self, layer: int, view: LayerView) -> torch.Tensor | None:
        return None

    def after(self, layer: int, view: LayerView) -> None:
        """Read a signal once the layer's K/V are written."""

    def end(self, view: LayerView) -> None:
        """Read the final hidden states (view.logits) once the last layer has run."""

    def choose(self, layer: int, view: LayerView) -> torch.Tensor | None:
        """`rows`, timed as decision work and recorded (a stream forward calls this, not `rows`)."""
        rows = self._timed(self.rows, layer, view)
        self.ran(layer, rows)
        return rows

    def ran(self, layer: int, rows: torch.Tensor | None) -> None:
        """Record that `layer` computed `rows` (None: every row)."""
        if rows is None:
            self.layer_rows[layer] = self.computed.numel()
            self.computed.fill_(True)
        else:
            self.layer_rows[layer] = rows.numel()
            self.computed[rows] = True

    def finish(self, layer: int, view: LayerView) -> None:
        """`after`, timed as decision work (the model calls this, not `after`)."""
        self._timed(self.after, layer, view)

    def close(self, view: LayerView) -> None:
        """`end`, timed as decision work (the model calls this, not `end`)."""
        self._timed(self.end, view)

    def _timed(self, work: Callable, *args):
        t0 = clock(self._device)
        out = work(*args)
        self.signal_s += clock(self._device) - t0
        return out
