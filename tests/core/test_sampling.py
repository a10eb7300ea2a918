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
    from core.config import DecodeConfig
    from core.decoder import decode
    from core.policies import make_policy

    def spiked(seed, block, block_step, block_len, vocab, device):
        return torch.eye(block_len, vocab, dtype=torch.float64, device=device).roll(1, dims=1) * 1e6

    monkeypatch.setattr(core.decoder, "block_noise", spiked)
    model = tiny_model(eos_token_ids=())
    config = DecodeConfig(gen_len=16, block_len=8, temperature=1.0, stop_at_eos=False)
    last = list(decode(model, [3, 9, 4], make_policy("entropy", tau=0.5), config))[-1]
    assert last.tokens == [i % 8 + 1 for i in range(16)]


def test_top_p_and_top_k_cut_the_logits_before_the_softmax_as_d2caches_sampler_does():
    """Row 0's tokens at p 0.5, 0.3, 0.15, 0.05: the 0.9 nucleus is its first three (the token that crosses
    0.9 is kept), so its best token reads 0.5 / 0.95; row 1's best token at 0.95 is a nucleus of its own (1.0).
    Ranked on the cut confidences row 1 goes first; the entropies stay the model's, uncut."""
    rows = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.95, 0.03, 0.015, 0.005]])
    picked, tokens, confidences, probs = choose(rows.log(), 1, None, top_p=0.9)
    assert tokens.tolist() == [0, 0] and picked.tolist() == [False, True]
    assert torch.allclose(confidences, torch.tensor([0.5 / 0.95, 1.0]))
    assert torch.allclose(probs, rows)
    _, _, confidences, _ = choose(rows.log(), 1, None, top_k=2)
    assert torch.allclose(confidences, torch.tensor([0.5 / 0.8, 0.95 / 0.98]))
    _, _, confidences, _ = choose(rows.log(), 1, None, top_p=0.7, top_k=1)  # nucleus {0, 1}, then its top 1
    assert confidences.tolist() == [1.0, 1.0]
    _, _, uncut, _ = choose(rows.log(), 1, None, top_p=1.0)  # top_p 1 cuts nothing
    assert torch.allclose(uncut, torch.tensor([0.5, 0.95]))


def test_a_nucleus_of_the_mask_alone_still_leaves_a_token_to_choose():
    """p[MASK] 0.65 > top_p 0.6: the nucleus is the mask, which is never chosen; the best other token
    joins it, and its confidence is its share of the two."""
    _, tokens, confidences, _ = choose(BIG_MASK[2:].log(), 1, None, mask_id=MASK, top_p=0.6)
    assert tokens.tolist() == [0] and torch.allclose(confidences, torch.tensor([0.2 / 0.85]))


def test_sampling_draws_only_inside_the_nucleus():
    rows = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    drawn = {int(choose(rows, 1, None, 1.0, block_noise(0, 0, step, 1, 4, torch.device("cpu")), top_p=0.7).tokens)
             for step in range(200)}
    assert drawn == {0, 1}


def test_each_ranking_algorithm_unmasks_its_own_best_row():
    """Row 0 has the most probable token (0.5), row 1 the widest margin (0.48 - 0.26), row 2 the lowest
    entropy (0.777 nats against 0.856 and 1.053): Dream's maskgit_plus, topk_margin and entropy each pick theirs."""
    rows = torch.tensor([[0.5, 0.45, 0.05], [0.48, 0.26, 0.26], [0.49, 0.49, 0.02]]).log()
    for alg, best in (("maskgit_plus", 0), ("topk_margin", 1), ("entropy", 2)):
        picked, *_ = choose(rows, 1, None, alg=alg)
        assert picked.nonzero().flatten().tolist() == [best], alg
