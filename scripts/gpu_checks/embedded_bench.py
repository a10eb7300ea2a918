"""The embedded model's interleaved bench, every policy, on the check's device."""

from __future__ import annotations

import torch

from core.config import DecodeConfig
from core.loading import load_model
from core.policies import TABLE_ORDER
from evaluation.bench import Contender, bench_progress, bench_rows
from evaluation.tasks import held_out
from scripts.gpu_checks.shapes import BLOCK


def embedded_bench(device: torch.device, n: int, gen_len: int, graphs: str, warmup: int) -> list[dict]:
    """The embedded model's interleaved bench, every policy, on this device."""
    model, tokenizer = load_model(None, device=device)
    contenders = [Contender(p, {}) for p in TABLE_ORDER]
    config = DecodeConfig(gen_len=gen_len, block_len=BLOCK, graphs=graphs)
    return bench_rows(bench_progress(model, tokenizer, held_out("words", n), contenders, config, warmup), bar=False)
