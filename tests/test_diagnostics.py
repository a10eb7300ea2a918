"""Drift and volatility diagnostics: correlations on known data, and probes against hand computation."""

import math

import pytest
import torch
from conftest import busy_for, tiny_model

from core.decoder import DecodeConfig, decode
from core.diagnostics import Probe, drift_vs_entropy, kv_drift, pearson, row_change, spearman, volatility_curve
from core.events import StepEvent
from core.kv_cache import KVCache
from core.policies import make_policy

PROMPT = [3, 9, 4, 12, 7, 30]


def test_correlations_on_known_data():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert pearson(x, [2 * v + 1 for v in x]) == pytest.approx(1.0)
    assert pearson(x, [-v for v in x]) == pytest.approx(-1.0)
    cubes = [v**3 for v in x]
    assert spearman(x, cubes) == pytest.approx(1.0) and pearson(x, cubes) < 0.99
    assert spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)  # ties: average ranks
    assert pearson([1.0, 2.0, 3.0], [1.0, 3.0, 2.0]) == pytest.approx(0.5)
    assert math.isnan(pearson([1.0, 1.0], [1.0, 2.0])) and math.isnan(pearson([1.0], [2.0]))
    with pytest.raises(ValueError, match="equal lengths"):
        pearson([1.0], [1.0, 2.0])


def _cache(k: torch.Tensor, v: torch.Tensor) -> KVCache:
    return KVCache([k], [v])


def test_kv_drift_and_row_change_by_hand():
    k = torch.randn(1, 2, 5, 4)
    v = torch.randn(1, 2, 5, 4)
    same = _cache(k.clone(), v.clone())
    assert kv_drift(same, _cache(k, v)) == ([pytest.approx(0.0, abs=1e-6)], [0.0])
    scaled = _cache(2 * k, 2 * v)  # same direction, twice the length
    cos, l2 = kv_drift(scaled, _cache(k, v))
    assert cos[0] == pytest.approx(0.0, abs=1e-6) and l2[0] == pytest.approx(1.0)
    change = row_change(_cache(k, v), scaled)
    torch.testing.assert_close(change, torch.ones(5))


def run(model, policy, probe):
    config = DecodeConfig(gen_len=8, block_len=8, stop_at_eos=False)
    return list(decode(model, PROMPT, policy, config, before_step=Probe(model) if probe else None))


def test_probe_changes_no_token_and_matches_a_hand_computation():
    model = tiny_model()
    plain = run(model, make_policy("none"), probe=False)
    probed = run(model, make_policy("none"), probe=True)
    assert [e.tokens for e in probed] == [e.tokens for e in plain]
    assert probed[0].drift_cos is None and probed[0].volatility is None
    # With `none`, the cache at the start of step t holds the fresh K/V of the tokens step t-1 saw.
    length = len(PROMPT) + 8
    t = 4
    saw = torch.tensor(PROMPT + probed[t - 2].tokens)  # the input of step t-1
    now = torch.tensor(PROMPT + probed[t - 1].tokens)  # the input of step t
    stale, fresh = model.new_cache(1, length), model.new_cache(1, length)
    with torch.no_grad():
        model(saw[None], stale)
        model(now[None], fresh)
    cos, l2 = kv_drift(stale, fresh)
    assert probed[t].drift_cos == pytest.approx(cos) and probed[t].drift_l2 == pytest.approx(l2)
    assert all(c > 0 for c in cos)
    # Volatility: one entry per token unmasked before step t, aged by steps since its unmasking,
    # valued as the change of its fresh K/V from the start of step t-1 to the start of step t.
    ages = sorted(age for age, _ in probed[t].volatility)
    assert ages == list(range(1, t + 1))
    change = row_change(stale, fresh)
    unmasked_at = {pos: s for s, e in enumerate(probed[:t]) for pos in e.unmasked}
    expected = sorted([t - s, float(change[pos])] for pos, s in unmasked_at.items())
    assert sorted(probed[t].volatility) == [[a, pytest.approx(v)] for a, v in expected]


def test_probe_time_is_not_counted_as_decode_time(monkeypatch):

    measure = Probe.__call__

    def slow(self, *args):
        busy_for(0.2)  # 8 steps: 1.6 s of this thread's CPU time, far more than the decode's
        return measure(self, *args)

    monkeypatch.setattr(Probe, "__call__", slow)
    probed = run(tiny_model(), make_policy("none"), probe=True)
    assert len(probed) == 8
    assert probed[-1].totals.compute_s < 0.8


def test_drift_vs_entropy_pairs_previous_entropy_with_current_drift():
    def event(step, max_entropy, drift):
        return StepEvent(step, 0, 3, [], [], [], [], max_entropy, False, "", [], [1, 1], 0.0, 0.0,
                         drift_cos=None if drift is None else [drift, drift],
                         drift_l2=None if drift is None else [2 * drift, 2 * drift],
                         volatility=[[1, 0.5], [2, 0.1]] if drift is not None else None)

    events = [event(0, 0.1, None), event(1, 0.9, 0.01), event(2, 0.3, 0.09), event(3, 0.0, 0.03)]
    r = drift_vs_entropy(events)
    assert r["entropy"] == [0.1, 0.9, 0.3] and r["drift_cos"] == [0.01, 0.09, 0.03]
    assert r["drift_l2"] == [0.02, 0.18, 0.06]
    assert r["spearman_cos"] == pytest.approx(1.0) and r["pearson_l2"] > 0.99
    assert volatility_curve(events) == {1: pytest.approx(0.5), 2: pytest.approx(0.1)}


def test_drift_values_are_finite_and_non_negative():
    """Dream-style model under EntropyCache: every drift value is a finite, non-negative number."""
    events = run(tiny_model("dream"), make_policy("entropy", tau=0.5, k=1), probe=True)
    for e in events[1:]:
        assert all(c >= -1e-6 and math.isfinite(c) for c in e.drift_cos)
        assert all(v >= 0 for v in e.drift_l2)
