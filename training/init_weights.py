"""How a model's weights start: number embeddings with value features, or a trained own model's weights."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from core.loading import load_model
from core.model import DiffusionTransformer


def value_features(values: torch.Tensor, dim: int) -> torch.Tensor:
    """Unit-norm sin/cos features of integer values, periods spread geometrically from 3 to 300:
    the long periods place numbers on a line (12 is near 13), the short ones keep every number
    distinct. Adding n to a value is then a rotation of these features, which the network can
    learn once for all numbers instead of memorising every sum as an unrelated token pair."""
    periods = torch.logspace(math.log10(3), math.log10(300), dim // 2)
    angles = 2 * math.pi * values.float()[:, None] / periods
    return torch.cat([angles.cos(), angles.sin()], dim=1) / math.sqrt(dim // 2)


@torch.no_grad()
def init_number_rows(model: DiffusionTransformer, number_ids: list[int], mix: float = 0.5) -> None:
    """Start the number tokens' input and output embeddings as a blend of their random init and
    value_features (same norms as the random rows). Initialisation only: the architecture and
    the checkpoint layout are unchanged, and every weight still trains."""
    ids = torch.tensor(number_ids)
    features = value_features(torch.arange(len(number_ids)), model.config.dim)
    for weight in (model.embed.weight, model.lm_head.weight):
        rows = weight[ids]
        norm = rows.norm(dim=1, keepdim=True)
        blended = math.sqrt(1 - mix) * rows / norm + math.sqrt(mix) * features
        weight[ids] = blended / blended.norm(dim=1, keepdim=True) * norm


@torch.no_grad()
def warm_start(model: DiffusionTransformer, tokenizer, folder: Path) -> list[str]:
    """Copy a trained own model's weights into `model`: every layer as it is, and the embedding and
    output rows of each token both tokenizers have (matched by the token, as the vocabularies are
    sorted). Tokens new to `model` keep their fresh init. Returns the new tokens.

    Why: a model that already solves word problems 0-shot only has to learn the k-shot format and the
    stories, instead of learning arithmetic again inside a mixture of three tasks."""
    old, old_tokenizer = load_model(folder)
    shapes = {k: (v.shape, old.state_dict()[k].shape) for k, v in model.state_dict().items()}
    for name, (new_shape, old_shape) in shapes.items():
        if name not in ("embed.weight", "lm_head.weight") and new_shape != old_shape:
            raise ValueError(f"--init-from {folder}: {name} is {tuple(old_shape)} there, {tuple(new_shape)} here")
    rows = old_tokenizer.get_vocab()
    new_tokens = []
    for name, weight in model.state_dict().items():
        source = old.state_dict()[name]
        if name not in ("embed.weight", "lm_head.weight"):
            weight.copy_(source)
            continue
        for token, i in tokenizer.get_vocab().items():
            if token in rows:
                weight[i] = source[rows[token]]
            elif name == "embed.weight":
                new_tokens.append(token)
    return sorted(new_tokens)
