"""Turning one step's logits into unmasked tokens (LLaDA's low-confidence remasking).

Every masked position of the block gets a candidate token (argmax, or Gumbel-max sampling when
temperature > 0); the most confident candidates are kept and the rest stay masked. With a
confidence threshold (Fast-dLLM's parallel decoding) every candidate above it is kept, and at
least the best one.
"""

from __future__ import annotations

import torch


def transfer_schedule(n_masked: int, steps: int) -> list[int]:
    """How many tokens to unmask at each of `steps` steps: as even as possible, extras first."""
    base, extra = divmod(n_masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def candidates(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """Candidate token per row: argmax of logits/T + Gumbel noise (plain argmax at T = 0)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    return (logits.double() / temperature + gumbel).argmax(dim=-1)


def choose(
    logits: torch.Tensor,
    n_transfer: int | None,
    threshold: float | None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pick rows of `logits` [n, vocab] to unmask, on the device and without waiting for it: the
    shapes never depend on what is picked.

    Returns (a bool mask of the picked rows [n], every row's candidate token [n], every row's
    probabilities [n, vocab]).
    """
    probs = torch.softmax(logits.float(), dim=-1)
    tokens = candidates(logits, temperature, generator)
    confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if threshold is not None:
        picked = confidence > threshold
        return picked.scatter_(0, confidence.argmax()[None], True), tokens, probs
    best = confidence.topk(min(n_transfer, confidence.numel())).indices
    return torch.zeros_like(confidence, dtype=torch.bool).scatter_(0, best, True), tokens, probs


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of each row of a probability matrix."""
    return torch.special.entr(probs).sum(dim=-1)
