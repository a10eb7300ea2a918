"""Tiny models for the tests: random weights in our own architecture, and an untrained own model saved
with the word problems' tokenizer in the embedded model's layout."""

from pathlib import Path

import torch

from core.config import ModelConfig
from core.model import DiffusionTransformer


def tiny_config(family: str = "llada", **overrides) -> ModelConfig:
    """LLaDA-style (no shift, no bias, full heads) or Dream-style (shift, q/k/v bias, grouped heads)."""
    base = dict(vocab_size=48, dim=64, n_layers=2, n_heads=4, ffn_dim=128, mask_token_id=47, eos_token_ids=(1,))
    if family == "dream":
        base.update(n_kv_heads=2, qkv_bias=True, logit_shift=1, family="dream")
    else:
        base.update(family="llada")
    base.update(overrides)
    return ModelConfig(**base)


def tiny_model(family: str = "llada", seed: int = 0, **overrides) -> DiffusionTransformer:
    torch.manual_seed(seed)
    model = DiffusionTransformer(tiny_config(family, **overrides)).eval()
    with torch.no_grad():  # sharpen the output so that some steps are confident (entropy below tau)
        model.lm_head.weight.mul_(8)
    return model


def word_problems_tokenizer():
    """A word-level tokenizer of the word problems' words alone: a model that never saw a story."""
    from evaluation.tasks import word_problems
    from training.word_tokenizer import build_tokenizer

    return build_tokenizer(word_problems.VOCABULARY)


def save_word_problems_model(folder: Path, **overrides) -> Path:
    """A tiny untrained own model with word_problems_tokenizer(), saved in the embedded model's layout;
    `overrides` are ModelConfig fields (e.g. its decode defaults gen_len and block_len)."""
    from training.checkpoint import save_own_model

    tok = word_problems_tokenizer()
    save_own_model(tiny_model(vocab_size=len(tok), mask_token_id=tok.mask_token_id, **overrides), tok, folder)
    return folder
