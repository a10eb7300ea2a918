"""Turning one step's logits into unmasked tokens (LLaDA's low-confidence remasking).

Every masked position of the block gets a candidate token (argmax, or Gumbel-max sampling when
temperature > 0); the most confident candidates are kept and the rest stay masked. With a
confidence threshold (Fast-dLLM's parallel decoding) every candidate above it is kept, and at
least the best one.

Probabilities are the softmax over the whole vocabulary, [MASK] included, as every reference computes
them (LLaDA's generate.py, Fast-dLLM, d2Cache, Dream): a confidence is p, never p / (1 - p[MASK]). The
mask is kept out of the chosen token only, so a position is never "decoded" into a mask.

`top_p` and `top_k` cut the logits before the softmax as d2Cache's sampler does (src/generation/utils.py
`sample_tokens`, with Dream's `top_p_logits` / `top_k_logits`): the nucleus first, then the top k, both
over the logits divided by the temperature; the confidence and the candidate come from what is left.
`alg` is how the candidates are ranked (Dream's and d2Cache's names): maskgit_plus by the candidate's
probability, topk_margin by top1 - top2, entropy by -H of the cut distribution.

The Gumbel noise of a step belongs to the block's positions, not to the masks left in it: it is
drawn from the seed, the block and the step within it, one row per position of the block. So two
decodes with the same seed that compute the same logits for a position at a step sample the same
token there, whatever each unmasked before: a race's lanes part only where their logits do.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

ALGS = ("maskgit_plus", "topk_margin", "entropy")  # how candidates are ranked (Dream's `alg`)
ENTROPY_EPS = 1e-10  # Dream's and d2Cache's, inside the log of the `entropy` ranking


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


class Choice(NamedTuple):
    """One step's token choice, every tensor on the logits' device."""

    picked: torch.Tensor  # bool [n]: the rows unmasked
    tokens: torch.Tensor  # [n]: every row's candidate token (never the mask)
    confidences: torch.Tensor  # [n]: each candidate's probability, in the (cut) distribution it was drawn from
    probs: torch.Tensor  # [n, vocab]: the model's distribution, whole vocabulary, temperature 1, uncut (entropies)


def kept(logits: torch.Tensor, temperature: float, top_p: float | None, top_k: int | None,
         mask_id: int | None) -> torch.Tensor | None:
    """Which tokens each row may choose from [n, vocab] after the nucleus and the top k, d2Cache's order,
    over logits / temperature (the nucleus of Dream's `top_p_logits` keeps the token that crosses top_p);
    None when nothing is cut. The best non-mask token is always kept, since the mask is never chosen."""
    if (top_p is None or top_p >= 1) and top_k is None:
        return None
    scaled = logits.double() / temperature if temperature else logits.double()
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if top_p is not None and top_p < 1:
        ordered, order = scaled.sort(dim=-1, descending=True)
        beyond = ordered.softmax(-1).cumsum(-1) > top_p
        beyond = torch.cat([torch.zeros_like(beyond[:, :1]), beyond[:, :-1]], dim=-1)  # keep the crossing token
        keep.scatter_(-1, order, ~beyond)
    if top_k is not None:
        kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        keep &= scaled >= kth
    best = _without_mask(scaled, mask_id).argmax(dim=-1, keepdim=True)
    return keep.scatter_(-1, best, True)


def _without_mask(logits: torch.Tensor, mask_id: int | None) -> torch.Tensor:
    if mask_id is None:
        return logits
    return logits.index_fill(-1, torch.tensor([mask_id], device=logits.device), float("-inf"))


def candidates(logits: torch.Tensor, temperature: float, noise: torch.Tensor | None,
               mask_id: int | None = None, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Candidate token per row: argmax of logits/T + the rows' Gumbel noise (plain argmax at T = 0), over
    the kept tokens, never the mask."""
    scores = logits if temperature == 0 else logits.double() / temperature + noise
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return _without_mask(scores, mask_id).argmax(dim=-1)


def scores_by(alg: str, probs: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
    """What ranks the candidates: their probability (maskgit_plus), the margin between a row's two most
    probable tokens (topk_margin), or its negative entropy (entropy), as Dream's `sample_tokens` has it."""
    if alg == "maskgit_plus":
        return confidence
    if alg == "topk_margin":
        top = probs.topk(2, dim=-1).values
        return top[:, 0] - top[:, 1]
    if alg == "entropy":
        return (probs * torch.log(probs + ENTROPY_EPS)).sum(dim=-1)
    raise ValueError(f"alg must be one of {', '.join(ALGS)}, got {alg!r}")


def choose(
    logits: torch.Tensor,
    n_transfer: int | None,
    threshold: float | None,
    temperature: float = 0.0,
    noise: torch.Tensor | None = None,
    *,
    mask_id: int | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    alg: str = "maskgit_plus",
) -> Choice:
    """Pick rows of `logits` [n, vocab] to unmask, on the device and without waiting for it: the
    shapes never depend on what is picked. `n_transfer` rows by `alg`'s ranking, or with a threshold
    every row whose candidate's probability is above it (at least the best one)."""
    probs = torch.softmax(logits.float(), dim=-1)
    keep = kept(logits, temperature, top_p, top_k, mask_id)
    drawn = probs if keep is None else torch.softmax(logits.float().masked_fill(~keep, float("-inf")), dim=-1)
    tokens = candidates(logits, temperature, noise, mask_id, keep)
    confidence = drawn.gather(-1, tokens[:, None]).squeeze(-1)
    score = scores_by(alg, drawn, confidence)
    if threshold is not None:
        picked = confidence > threshold
        return Choice(picked.scatter_(0, score.argmax()[None], True), tokens, confidence, probs)
    best = score.topk(min(n_transfer, score.numel())).indices
    return Choice(torch.zeros_like(score, dtype=torch.bool).scatter_(0, best, True), tokens, confidence, probs)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of each row of a probability matrix."""
    return torch.special.entr(probs).sum(dim=-1)
