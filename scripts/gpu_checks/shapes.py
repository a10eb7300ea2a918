"""The GPU check's shapes and settings (the two checkpoints' exact shapes, tiny stand-ins for the dry run),
a model of a shape built with random weights, a call timed, a prompt drawn."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from core.config import ModelConfig
from core.device import sync
from core.model import DiffusionTransformer

ROOT = Path(__file__).resolve().parents[2]  # the repository: app.py, git's HEAD
# The exact shapes of the two checkpoints (their config.json), and tiny stand-ins for the dry run.
SHAPES = {
    "LLaDA-8B-Instruct": dict(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_dim=12288,
                              rope_theta=500000.0, mask_token_id=126336, max_seq_len=4096, family="llada"),
    "Dream-v0-Instruct-7B": dict(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_dim=18944,
                                 rope_theta=1000000.0, mask_token_id=151666, qkv_bias=True, logit_shift=1,
                                 max_seq_len=32768, family="dream"),
}
TINY = dict(vocab_size=512, dim=64, n_layers=2, ffn_dim=128, mask_token_id=500)
LENGTHS = [(1000, 256), (1000, 512), (256, 256), (40, 128)]  # (prompt, gen)
TINY_LENGTHS = [(40, 32), (8, 32)]  # two shapes are enough to run every line
BLOCK, K, TAU, THRESHOLD = 32, 2, 0.5, 0.9
MEASURED_BLOCKS = 1
REPEATS = 5  # timed calls of a pass, after three warm-up calls (graphed replays vary by ~1%)
MODES = ("one token per step", "threshold 0.9")


def build(shape: dict, device: torch.device, dry: bool, n_layers: int | None = None) -> DiffusionTransformer:
    """A model of this shape with random weights, built on the device in bf16 (float32 on CPU)."""
    tiny = dict(TINY, n_heads=4, n_kv_heads=2 if shape["family"] == "dream" else 4)
    cfg = ModelConfig(**{**shape, **tiny} if dry else {**shape, "n_layers": n_layers or shape["n_layers"]})
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = DiffusionTransformer(cfg).eval()
        finally:
            torch.set_default_dtype(previous)
    return model


def seconds_per_call(run, device: torch.device, repeats: int) -> float:
    """Mean seconds of run() over `repeats` calls after three warm-up calls, the device synchronised."""
    for _ in range(3):
        run()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        run()
    sync(device)
    return (time.perf_counter() - t0) / repeats


def prompt_ids(model, prompt: int) -> list[int]:
    """The random prompt of this length, the same for every path and policy."""
    generator = torch.Generator().manual_seed(prompt)
    return torch.randint(0, model.config.mask_token_id, (prompt,), generator=generator).tolist()


def free() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
