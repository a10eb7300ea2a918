"""What the two command lines (core.generate, core.bench) share: decode settings from their flags.

Kept apart from core/generate.py so that importing these never imports that module, whose name is
also the package's `core.generate` function: importing a submodule rebinds the package attribute.
"""

from __future__ import annotations

import torch

from core.decoder import DecodeConfig


def decode_config(model, gen_len: int | None, block_len: int | None, **settings) -> DecodeConfig:
    """A DecodeConfig whose gen and block length default (when None) to the model's own decode
    defaults (its config.json), else LLaDA's 128 and 32; `settings` are the other fields."""
    d = getattr(model, "decode_defaults", {})
    return DecodeConfig(
        gen_len=d.get("gen_len", 128) if gen_len is None else gen_len,
        block_len=d.get("block_len", 32) if block_len is None else block_len,
        **settings,
    )


def check_before_load(gen_len: int | None, block_len: int | None, **settings) -> None:
    """Reject decode flags that are wrong whatever the model, before loading it (an 8B load takes
    minutes). What depends on the model's default lengths is checked once it is loaded."""
    if gen_len is not None and block_len is not None:  # nothing left to the model: check it all
        DecodeConfig(gen_len=gen_len, block_len=block_len, **settings).validate()
        return
    if block_len is not None and block_len < 1:
        raise ValueError(f"block_len must be a positive integer, got {block_len}")
    lengths = {} if gen_len is None else {"gen_len": gen_len, "block_len": max(gen_len, 1)}
    others = {k: v for k, v in settings.items() if k != "steps"}  # the steps' range needs both lengths
    DecodeConfig(**lengths, **others).validate()


def torch_dtype(name: str | None) -> torch.dtype | None:
    """--dtype's name as a torch dtype; None leaves the loader's default."""
    return getattr(torch, name) if name else None
