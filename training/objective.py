"""The training objective: LLaDA's masked-diffusion loss on a batch's target tokens, with results hidden
together with their copies.

Prompts are never masked; each target token is masked with probability t ~ U(eps, 1) and the loss is
the cross-entropy on masked tokens weighted by 1/t (LLaDA's ELBO weight). t is stratified over the
batch, and result groups (training/batches.py) are hidden whole, so the model must compute a result
rather than copy it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from training.batches import Batch

EPS = 1e-3


def hidden_mask(targets: torch.Tensor, groups: torch.Tensor, gen: torch.Generator):
    """Which target tokens to hide: (by_t, by_group, t).

    by_t is LLaDA's mask, each target hidden with probability t, and t is stratified (one draw in
    each 1/b of [0, 1]) so that every batch spans light and heavy masking. by_group adds, in half
    the rows, whole result groups hidden with probability 1/2: the state the decoder is in when it
    reaches a line's result with the rest of the chain still masked.
    """
    b, n = targets.shape
    t = (1 - EPS) * (torch.arange(b).unsqueeze(1) + torch.rand(b, 1, generator=gen)) / b + EPS
    by_t = (torch.rand(b, n, generator=gen) < t) & targets
    hide = torch.rand(b, int(groups.max()) + 1, generator=gen) < 0.5
    hide[:, 0] = False  # group 0: not a result
    rows = torch.rand(b, 1, generator=gen) < 0.5
    return by_t, torch.gather(hide, 1, groups) & rows, t


def diffusion_loss(model, batch: Batch, mask_id: int, gen: torch.Generator) -> torch.Tensor:
    """Cross-entropy on hidden targets, per target token: weight 1/t for the t-mask (LLaDA's ELBO
    weight), 1 for tokens hidden only by their result group."""
    by_t, by_group, t = hidden_mask(batch.targets, batch.groups, gen)
    hidden = by_t | by_group
    logits = model.full_logits(torch.where(hidden, mask_id, batch.ids), batch.key_mask)
    ce = F.cross_entropy(logits[hidden], batch.ids[hidden], reduction="none")
    weights = torch.where(by_t, 1 / t, 1.0)[hidden]  # row-major, same order as logits[hidden]
    return (ce * weights).sum() / batch.targets.sum()
