"""Elastic-Cache: the tracked-token choice and the drift test on hand-made attention, and its layer plan."""

import torch
from tiny_models import tiny_model

from core.config import DecodeConfig
from core.decoder import decode
from core.policies import make_policy
from core.policies.elastic import DriftWatch


class HandMadeView:
    """Attention probabilities chosen by hand: `probs[i]` for the query row i (one head, 6 keys)."""

    def __init__(self, probs):
        self.probs = torch.tensor(probs)[None, None]  # [batch, heads, rows, keys]
        self.x = torch.zeros(1, 6, 2)

    def queries(self, rows):
        return rows.float()[None, None, :, None]  # a query that names its row

    def probabilities(self, q):
        return self.probs[:, :, q[0, 0, :, 0].long()]


def watch(active, window, tracked, masked, gamma=0.9):
    policy = make_policy("elastic", gamma=gamma)
    policy.queries = [torch.zeros(1, 1, 6, 1)]
    w = DriftWatch(policy, torch.tensor(active), torch.tensor(window), torch.tensor(tracked), torch.tensor(masked))
    w.begin(2, 6, torch.device("cpu"))
    return w


def test_the_tracked_token_is_the_key_the_window_attends_to_most_among_unmasked_ones():
    # Rows 4, 5 form the window and are masked; they attend most to 5 (masked, excluded), then 1.
    probs = [[1 / 6] * 6] * 4 + [[0.1, 0.3, 0.1, 0.0, 0.0, 0.5], [0.1, 0.3, 0.2, 0.0, 0.0, 0.4]]
    w = watch(active=[0, 4, 5], window=[4, 5], tracked=[0], masked=[4, 5])
    w.reference = torch.tensor(probs)[None, None, [0]]
    w.after(0, HandMadeView(probs))
    assert w.picks[0].tolist() == [1]
    assert w.full_from is None  # the tracked row 0 attends as before: similarity 1


def test_a_drifting_layer_sends_every_deeper_layer_to_full():
    probs = [[0.5, 0.5, 0, 0, 0, 0]] + [[1 / 6] * 6] * 5
    w = watch(active=[0, 4, 5], window=[4, 5], tracked=[0], masked=[4, 5])
    # Before this step row 0 attended to keys 2 and 3 only: cosine across heads per key is 0 on every key.
    w.reference = torch.tensor([[0, 0, 0.5, 0.5, 0, 0]])[None, None]
    w.after(0, HandMadeView(probs))
    assert w.full_from == 1  # layer 0 itself is not recomputed
    assert w.rows(1, None) is None


def test_elastic_plans_layer_by_layer():
    """gamma 1: every layer but the first recomputes every row after step 0 (the first layer's
    similarity is below 1 as soon as a key changed); a low gamma never refreshes."""
    model = tiny_model(n_layers=3)
    cfg = DecodeConfig(gen_len=8, block_len=4, stop_at_eos=False)
    strict = list(decode(model, [5, 6, 7], make_policy("elastic", gamma=1.0, window=4), cfg))
    assert strict[0].layer_rows == [11, 11, 11]
    assert all(e.layer_rows[1:] == [11, 11] and e.layer_rows[0] < 11 for e in strict[1:])
    assert all(e.reason.endswith("< gamma 1 at layer 0: layers 1+ recomputed in full") for e in strict[1:])
    loose = list(decode(model, [5, 6, 7], make_policy("elastic", gamma=0.01, window=4), cfg))
    assert all(len(set(e.layer_rows)) == 1 and e.layer_rows[0] < 11 for e in loose[1:])
    assert loose[1].reason == "partial: tracked + last decoded + window rows"
