"""d2Cache's selection pieces against hand-computed cases."""

import math

import torch

from core.policies import Outcome, StepContext, make_policy
from core.policies.d2cache import RolloutProbe, certainty_density, inflate, nucleus


def test_certainty_density_is_the_smoothed_share_of_decoded_neighbours():
    assert torch.allclose(certainty_density(torch.ones(3, dtype=torch.bool), 1.0), torch.ones(3))
    g = [math.exp(-d * d / 2) for d in range(-3, 4)]  # sigma 1 over offsets -3..3
    nothing = certainty_density(torch.zeros(3, dtype=torch.bool), 1.0)
    # Only the prompt side (left, always decoded) contributes: position j sees offsets j+1..3 to its left.
    expected = [sum(g[3 + d] for d in range(j + 1, 4)) / sum(g) for j in range(3)]
    assert torch.allclose(nothing, torch.tensor(expected))
    last = certainty_density(torch.tensor([False, False, True]), 1.0)  # the right side now counts too
    assert last[2] > last[1] > nothing[1]


def test_nucleus_keeps_the_top_share_and_at_least_one():
    scores = torch.tensor([0.5, 0.3, 0.15, 0.05])
    every = torch.ones(4, dtype=torch.bool)
    assert sorted(nucleus(scores, every, 0.85).tolist()) == [0, 1]
    assert nucleus(scores, every, 0.1).tolist() == [0]
    others = torch.tensor([False, True, True, True])  # renormalised: 0.6, 0.3, 0.1
    assert nucleus(scores, others, 0.85).tolist() == [1]


def test_nucleus_at_p_1_keeps_every_candidate_whatever_the_rounding():
    scores = torch.tensor([0.7644292116165161, 0.3750535845756531])  # normalised, their float32 sum is 1.0000001
    ordered = torch.sort(scores / (scores.sum() + 1e-9), descending=True).values
    assert torch.cumsum(ordered, 0)[-1] > 1  # the edge: compared with p = 1, the last candidate would drop
    assert sorted(nucleus(scores, torch.ones(2, dtype=torch.bool), 1.0).tolist()) == [0, 1]


def test_inflate_fills_short_gaps_only():
    chosen = torch.zeros(12, dtype=torch.bool)
    chosen[[1, 4, 10]] = True
    assert inflate(chosen, 3).nonzero().flatten().tolist() == [1, 2, 3, 4, 10]


def test_rollout_importance_equals_the_dense_product():
    probe = RolloutProbe(0, None)
    probe.attention = [(torch.tensor([0]), torch.tensor([[0.0, 1.0, 0.0]])),  # layer 0: row 0 looks at 1
                       (torch.tensor([2]), torch.tensor([[1.0, 0.0, 0.0]]))]  # layer 1: row 2 looks at 0
    m0 = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    m1 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    dense = (m1 @ m0).sum(dim=0)
    assert torch.allclose(probe.importance(3), dense) and dense.tolist() == [0.75, 1.75, 0.5]


def test_next_rows_are_certain_masks_decoded_tokens_and_the_rollout_nucleus():
    """Prompt 0..3, response 4..11 in blocks of 4; step 1 decoded position 4. The frozen confidence
    ranks the masked rows; with current_k 2 the block's rows 5 and 6 come first (in-block priority)."""
    policy = make_policy("d2cache", current_k=2, rollout_p=0.3, sigma=2.0, inflate_w=0)
    policy.confidence = torch.tensor([0.9, 0.2, 0.8, 0.1, 0.99, 0.99, 0.99, 0.99])
    probe = RolloutProbe(0, None)
    row = torch.zeros(12)
    row[0] = 1.0  # every computed row attends only to position 0
    probe.attention = [(torch.arange(12), row.expand(12, 12))]
    policy.probe = probe
    ctx = StepContext(1, 0, 1, 4, 8, 4, 12, (5, 6, 7), (4,))
    policy.observe(ctx, Outcome((6,), (0.1,)))
    # masked 5, 7 (6 was just decoded): in block, the top 2; 6 just decoded; 0 holds the rollout's weight
    assert policy.next_rows == [0, 5, 6, 7]


def _attending(length: int, weights: dict[int, float]) -> RolloutProbe:
    """A one-layer probe whose every row attends to `weights` (position: share)."""
    probe = RolloutProbe(0, None)
    row = torch.zeros(length)
    for pos, w in weights.items():
        row[pos] = w
    probe.attention = [(torch.arange(length), row.expand(length, length))]
    return probe


def test_the_search_window_is_sized_by_the_blocks_masked_count_as_d2caches_code_runs():
    """Prompt 0..3, response 4..15 in blocks of 4; 4 and 5 decoded, step 2 decodes 6. With current_k 3 the
    3rd remaining mask is position 9 (response index 5). d2Cache's block mask, narrowed in place to the block's
    two masks (6, 7), sizes its "blocks" at 2: the window ends at index 5 (position 9), so 7, 8, 9 are chosen.
    Sized by the block's length (4) it would reach position 11 and take the confident 10 and 11 instead of 8, 9."""
    policy = make_policy("d2cache", current_k=3, rollout_p=0.01, sigma=2.0, inflate_w=0)
    policy.confidence = torch.tensor([0.9, 0.9, 0.9, 0.9, 0.01, 0.01, 0.99, 0.99, 0.5, 0.5, 0.5, 0.5])
    policy.probe = _attending(16, {0: 1.0})
    ctx = StepContext(2, 0, 2, 4, 8, 4, 16, (6, 7), (4, 5))
    policy.observe(ctx, Outcome((6,), (0.1,)))
    assert policy.next_rows == [0, 6, 7, 8, 9]


def test_dreams_last_prompt_row_is_set_after_the_nucleus_as_d2cache_sets_it():
    """Dream (logits of position i at row i-1), prompt 0..3, block 4..7. Row 3 holds most of the rollout's
    weight, row 0 the rest. While position 4 is among the chosen masks, row 3 is chosen and the nucleus,
    which may pick it too, picks nothing else; once 4 is decoded, row 3 is left out though the nucleus
    picked it."""
    policy = make_policy("d2cache", current_k=2, rollout_p=0.3, sigma=2.0, inflate_w=0)
    policy.confidence = torch.tensor([0.9, 0.8, 0.1, 0.1, 0.5, 0.5, 0.5, 0.5])
    policy.probe = _attending(12, {3: 0.8, 0: 0.2})
    policy.observe(StepContext(1, 0, 1, 4, 8, 4, 12, (4, 5, 6, 7), (), 1), Outcome((6,), (0.1,)))
    assert policy.next_rows == [3, 4, 6]  # masks 4, 5 -> rows 3 (after the nucleus), 4; 6 just decoded
    policy.probe = _attending(12, {3: 0.8, 0: 0.2})
    policy.observe(StepContext(2, 0, 2, 4, 8, 4, 12, (5, 7), (4, 6), 1), Outcome((7,), (0.1,)))
    assert policy.next_rows == [4, 7]  # mask 5 -> row 4; 7 just decoded; the nucleus's row 3 is dropped
