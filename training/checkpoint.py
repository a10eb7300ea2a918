"""Saving the project's own model in the same layout users get from the hub.

A folder with config.json, model.safetensors and the tokenizer files: `core.loading.load_model`
reads it through the same path as LLaDA and Dream.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.families import OWN_MODEL_TYPE
from core.model import DiffusionTransformer


def save_own_model(
    model: DiffusionTransformer,
    tokenizer,
    out: Path,
    dtype: torch.dtype = torch.bfloat16,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        state.pop("lm_head.weight")
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    tokenizer.save_pretrained(out)
    config = {
        "model_type": OWN_MODEL_TYPE,
        "architectures": ["DiffusionTransformer"],
        "torch_dtype": str(dtype).removeprefix("torch."),
        **model.config.to_dict(),  # decode defaults (gen_len, block_len) included
    }
    # Written last: a folder with a config.json holds a whole model (a recipe skips such a stage).
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
