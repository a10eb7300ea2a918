"""Check 6: the host syncs torch reports in a graphed EntropyCache step (torch.cuda.set_sync_debug_mode)."""

from __future__ import annotations

import itertools
import warnings

import torch

from core.config import DecodeConfig
from core.decoder import decode
from core.passes import release_graphs
from scripts.gpu_checks.end_to_end import timed_decode
from scripts.gpu_checks.replayed import ReplayedEntropy
from scripts.gpu_checks.shapes import BLOCK


def syncs_per_step(model, length: tuple[int, int], blocks) -> dict | None:
    """Host syncs torch reports in graphed EntropyCache steps, once their graphs are captured (None on a CPU)."""
    if not torch.cuda.is_available() or model.embed.weight.device.type != "cuda":
        return None
    prompt, gen = length
    ids = torch.randint(0, model.config.mask_token_id, (prompt,)).tolist()
    config = DecodeConfig(gen_len=gen, block_len=BLOCK, stop_at_eos=False, graphs="on")
    timed_decode(model, ids, ReplayedEntropy(blocks), config, BLOCK)  # captures what the next decode needs
    steps = decode(model, ids, ReplayedEntropy(blocks), config)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            n = sum(1 for _ in itertools.islice(steps, BLOCK))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    steps.close()
    kinds: dict[str, int] = {}
    for w in seen:
        key = str(w.message).split("\n")[0][:120]
        kinds[key] = kinds.get(key, 0) + 1
    release_graphs(model)
    return dict(steps=n, per_step=len(seen) / n, kinds=kinds)
