"""Turning one step's logits into unmasked tokens (LLaDA's low-confidence remasking).

Every masked position of the block gets a candidate token (argmax, or Gumbel-max sampling when
temperature > 0); the most confident candidates are kept and the rest stay masked. With a
confidence threshold (Fast-dLLM's parallel decoding) every candidate above it is kept, and at
least the best one.

The Gumbel noise of a step belongs to the block's positions, not to the masks left in it: it is
drawn from the seed, the block and the step within it, one row per position of the block. So two
decodes with the same seed that compute the same logits for a position at a step sample the same
token there, whatever each unmasked before: a race's lanes part only where their logits do.
"""

from __future__ import annotations

import torch


def transfer_schedule(n_masked: int, steps: int) -> list[int]:
    """How many tokens to unmask at each of `steps` steps: as even as possible, extras first."""
    base, extra = divmod(n_masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def block_noise(seed: int, block: int, block_step: int, block_len: int, vocab: int,
                device: torch.device) -> torch.Tensor:
    """Gumbel noise [block_len, vocab] for one step of one block: row i is the block's i-th position's.
    The whole block is drawn at once, since a generator's first rows need not be those of a shorter draw."""
    key = (seed * 1_000_003 + block) * 100_003 + block_step  # one stream per (seed, block, step)
    generator = torch.Generator(device=device).manual_seed(key % 2**63)
    u = torch.rand((block_len, vocab), generator=generator, device=device, dtype=torch.float64)
    return -torch.log(-torch.log(u.clamp_min(1e-300)))


def candidates(logits: torch.Tensor, temperature: float, noise: torch.Tensor | None) -> torch.Tensor:
    """Candidate token per row: argmax of logits/T + the rows' Gumbel noise (plain argmax at T = 0)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return (logits.double() / temperature + noise).argmax(dim=-1)


def choose(
    logits: torch.Tensor,
    n_transfer: int | None,
    threshold: float | None,
    temperature: float = 0.0,
    noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pick rows of `logits` [n, vocab] to unmask, on the device and without waiting for it: the
    shapes never depend on what is picked.

    Returns (a bool mask of the picked rows [n], every row's candidate token [n], every row's
    probabilities [n, vocab]).
    """
    probs = torch.softmax(logits.float(), dim=-1)
    tokens = candidates(logits, temperature, noise)
    confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if threshold is not None:
        picked = confidence > threshold
        return picked.scatter_(0, confidence.argmax()[None], True), tokens, probs
    best = confidence.topk(min(n_transfer, confidence.numel())).indices
    return torch.zeros_like(confidence, dtype=torch.bool).scatter_(0, best, True), tokens, probs


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of each row of a probability matrix."""
    return torch.special.entr(probs).sum(dim=-1)
