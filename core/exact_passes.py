"""A decode's passes over the exact rows: one decode's token sequence and KV cache, and each step's pass
over the rows its plan names, eagerly or, where the model's passes are compiled (core/compiled.py),
compiled with dynamic shapes. The static path (core/passes.py) pads them to fixed shapes instead.

Positions cross to the device as index tensors built from a host array, copied without waiting for
the device.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import torch

from core.compiled import CompiledPasses, compiled_passes
from core.kv_cache import KVCache
from core.layerwise import LayerHook
from core.model import DiffusionTransformer
from core.threads import TEAM


def host_index(positions: Sequence[int]) -> torch.Tensor:
    """An int64 CPU tensor of a few positions. Viewing an int64 array costs ~20 us, torch.tensor(list)
    ~36 us: it inspects every item."""
    if not positions:  # frombuffer refuses an empty buffer
        return torch.empty(0, dtype=torch.long)
    return torch.frombuffer(array("q", positions), dtype=torch.long)


def index_tensor(positions: Sequence[int], device: torch.device) -> torch.Tensor:
    """host_index on `device`, copied without waiting for the device (a blocking copy would wait for
    every kernel queued before it)."""
    return host_index(positions).to(device, non_blocking=True)


class Passes:
    """One decode's token sequence and KV cache, and its passes over the exact rows: eagerly, or compiled
    where the model's passes are (core/compiled.py; a pass with a layer hook always runs eagerly)."""
    # Where the decoded tokens' entropies are computed (core/decoder.py): here, for the picked rows only,
    # after the step's readout; on the static path for every masked row, read out with the token choice,
    # since on a GPU a second readout is a second wait of the host for the device.
    entropies_in_readout = False

    def __init__(self, model: DiffusionTransformer, length: int) -> None:
        self.device = model.embed.weight.device
        self.mask_id = model.config.mask_token_id
        self.tokens = torch.full((length,), self.mask_id, dtype=torch.long, device=self.device)
        self.cache: KVCache = model.new_cache(1, length)
        self.capture_s = 0.0  # seconds spent capturing graphs or compiling passes so far: no step's time
        self.compiled: CompiledPasses | None = compiled_passes(model)
        if self.compiled is not None:  # a compiled pass reads the RoPE tables as they were: build them once
            model.reserve_rope(model.config.max_seq_len, self.device)

    @property
    def length(self) -> int:
        return self.tokens.numel()

    def start(self, prompt: list[int]) -> None:
        """The prompt followed by masks; the cache as a new one (zeros)."""
        self.tokens[: len(prompt)] = index_tensor(prompt, self.device)
        self.tokens[len(prompt) :] = self.mask_id

    def run(self, model: DiffusionTransformer, rows: list[int] | None, needed: list[int],
            hook: LayerHook | None = None, threads: int | None = None) -> torch.Tensor:
        """Logits [len(needed), vocab] of positions `needed` after computing `rows` (sorted, a
        superset of needed; None: every row) against the cache, on a CPU on `threads` threads (None: as
        many as no other process keeps busy, core/threads.py)."""
        if self.device.type == "cpu" and threads is None:
            TEAM.fit()
        index = None if rows is None else index_tensor(rows, self.device)
        logit_rows = index_tensor(needed, self.device)
        if self.compiled is not None and hook is None:
            compiled_before = self.compiled.compile_s
            logits = self.compiled(model, self.tokens, self.cache, index, logit_rows)
            self.capture_s += self.compiled.compile_s - compiled_before
            return logits[0]
        ids = self.tokens[None] if index is None else self.tokens[index][None]
        return model(ids, self.cache, index, logit_rows, hook=hook)[0]
