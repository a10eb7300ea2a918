"""Token choice: the schedule, the picked mask, and Gumbel noise that belongs to a block's positions."""

import math

import torch

from core.sampling import block_noise, candidates, choose, entropy, transfer_schedule


def test_the_schedule_spreads_a_block_evenly_extras_first():
    assert transfer_schedule(32, 32) == [1] * 32
    assert transfer_schedule(10, 4) == [3, 3, 2, 2]


def test_choose_picks_the_most_confident_or_every_one_above_the_threshold():
    logits = torch.tensor([[0.0, 4.0, 0.0], [0.0, 0.0, 1.0], [9.0, 0.0, 0.0]])
    picked, tokens, _, probs = choose(logits, 2, None)
    assert picked.tolist() == [True, False, True] and tokens.tolist() == [1, 2, 0]
    assert torch.allclose(probs.sum(-1), torch.ones(3))
    picked, *_ = choose(logits, None, 0.99)
    assert picked.tolist() == [False, False, True]
    picked, *_ = choose(logits, None, 0.9999999)  # none above it: the most confident one anyway
    assert picked.tolist() == [False, False, True]


MASK = 3  # the mask token of the hand-made rows below (a vocabulary of four)
# Row 0: its best token at p 0.678 beside p[MASK] 0.237, renormalised without the mask 0.888; row 1: 0.725
# with p[MASK] ~ 0 (the case the issue found: renormalised, row 0 jumps ahead); row 2: the mask ranked first.
BIG_MASK = torch.tensor([[0.678, 0.080, 0.005, 0.237], [0.725, 0.270, 0.004, 0.001], [0.2, 0.1, 0.05, 0.65]])


def test_confidences_and_entropies_are_over_the_whole_vocabulary_and_the_mask_is_never_chosen():
    picked, tokens, confidences, probs = choose(BIG_MASK.log(), 1, None, mask_id=MASK)
    assert tokens.tolist() == [0, 0, 0]  # row 2's mask (0.65) is not an answer; its best other token is
    assert picked.tolist() == [False, True, False]  # 0.725 beats 0.678, which renormalised would read 0.888
    assert torch.allclose(confidences, torch.tensor([0.678, 0.725, 0.2]))  # p itself, never p / (1 - p[MASK])
    assert torch.allclose(probs, BIG_MASK)  # the mask's share stays in the distribution
    whole = [-sum(p * math.log(p) for p in row) for row in BIG_MASK.tolist()]
    assert torch.allclose(entropy(probs), torch.tensor(whole))
    picked, *_ = choose(BIG_MASK.log(), None, 0.7, mask_id=MASK)  # the threshold reads p too: 0.678 is below it
    assert picked.tolist() == [False, True, False]


def test_the_noise_is_the_seeds_the_blocks_and_the_steps():
    noise = block_noise(7, 2, 5, 8, 50, torch.device("cpu"))
    assert noise.shape == (8, 50) and torch.equal(noise, block_noise(7, 2, 5, 8, 50, torch.device("cpu")))
    for other in (block_noise(8, 2, 5, 8, 50, torch.device("cpu")), block_noise(7, 3, 5, 8, 50, torch.device("cpu")),
                  block_noise(7, 2, 6, 8, 50, torch.device("cpu"))):
        assert not torch.equal(noise, other)


def test_a_position_samples_the_same_token_whatever_else_is_masked():
    """Two decodes with the same logits for position 5 of a block sample the same token there, though one
    has positions 1 and 5 masked and the other 3, 5 and 6: each row's noise is its position's."""
    torch.manual_seed(0)
    vocab, noise = 40, block_noise(3, 0, 4, 8, 40, torch.device("cpu"))
    position_5 = torch.randn(vocab)
    one = torch.stack([torch.randn(vocab), position_5])  # masked offsets 1, 5
    other = torch.stack([torch.randn(vocab), position_5, torch.randn(vocab)])  # masked offsets 3, 5, 6
    a = candidates(one, 1.0, noise[[1, 5]])
    b = candidates(other, 1.0, noise[[3, 5, 6]])
    assert a[1] == b[1]
    draws = {int(candidates(position_5[None], 1.0, block_noise(3, 0, step, 8, vocab, torch.device("cpu"))[[5]]))
             for step in range(40)}
    assert len(draws) > 3  # it is sampling: other steps draw other tokens


def test_the_decoder_gives_each_masked_position_its_own_row_of_the_blocks_noise(monkeypatch):
    """Noise that makes token i+1 win at the block's i-th position: whatever is masked when, every
    position gets its own row (ranked among the masks left, a row would move as they are unmasked)."""
    from tiny_models import tiny_model

    import core.decoder
    from core.decoder import DecodeConfig, decode
    from core.policies import make_policy

    def spiked(seed, block, block_step, block_len, vocab, device):
        return torch.eye(block_len, vocab, dtype=torch.float64, device=device).roll(1, dims=1) * 1e6

    monkeypatch.setattr(core.decoder, "block_noise", spiked)
    model = tiny_model(eos_token_ids=())
    config = DecodeConfig(gen_len=16, block_len=8, temperature=1.0, stop_at_eos=False)
    last = list(decode(model, [3, 9, 4], make_policy("entropy", tau=0.5), config))[-1]
    assert last.tokens == [i % 8 + 1 for i in range(16)]
