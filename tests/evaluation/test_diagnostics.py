"""Drift and volatility diagnostics: correlations on known data, and probes against hand computation."""

import math

import pytest
import torch
from busy import busy_for
from tiny_models import tiny_model

from core.config import DecodeConfig
from core.decoder import decode
from core.events import StepEvent
from core.kv_cache import KVCache
from core.policies import make_policy
from evaluation.diagnostics import (
    Probe,
    StepPair,
    drift_analysis,
    full_next,
    kv_drift,
    links,
    pearson,
    row_change,
    spearman,
    staleness_curve,
    step_pairs,
    verdict,
    volatility_curve,
    what_holds,
)

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
    # Drift as the paper means it: every row's change, the same measure, from step t-1's start to step t's
    assert probed[t].kv_change == pytest.approx(change.tolist()) and probed[1].kv_change is not None


def test_probe_time_is_not_counted_as_decode_time(monkeypatch):

    measure = Probe.__call__

    def slow(self, *args):
        busy_for(0.2)  # 8 steps: 1.6 s of this thread's CPU time, far more than the decode's
        return measure(self, *args)

    monkeypatch.setattr(Probe, "__call__", slow)
    probed = run(tiny_model(), make_policy("none"), probe=True)
    assert len(probed) == 8
    assert probed[-1].totals.compute_s < 0.8


EOS = 1


def event(step, block, full, rows, max_entropy, change, staleness, tokens=(5, 5)):
    """A probed step: 4 positions (0, 1 the prompt), `rows` computed, each row's K/V `change` since the last step."""
    return StepEvent(step, block, 2, list(tokens), [], [], [], max_entropy, full, "", list(rows), [1, 1], 0.0, 0.0,
                     drift_cos=None if change is None else [staleness, staleness],
                     drift_l2=None if change is None else [staleness, 3 * staleness],
                     volatility=[[1, 0.5], [2, 0.1]] if change is not None else None, kv_change=change)


ALL = [0, 1, 2, 3]
EVENTS = [
    event(0, 0, True, ALL, 0.1, None, None),
    event(1, 0, False, [2, 3], 0.9, [0.0, 0.3, 0.4, 0.6], 0.01),  # after step 0 (full): 1 since full
    event(2, 0, False, [3], 0.3, [0.1, 0.1, 0.1, 0.9], 0.02, tokens=(EOS, 5)),
    event(3, 1, True, ALL, 0.0, [0.3, 0.3, 0.3, 0.3], 0.03, tokens=(EOS, 5)),  # a block start, after an eos
]


def test_step_pairs_split_the_change_by_the_next_steps_rows_and_mark_tail_and_block_starts():
    one, two, three = step_pairs(EVENTS, {EOS})
    assert one == StepPair(1, 0.1, pytest.approx(0.325), pytest.approx(0.5), pytest.approx(0.15), False,
                           pytest.approx(0.02), 1, False, False)
    assert (two.entropy, two.recomputed, two.reused, two.since_full) == (0.9, 0.9, pytest.approx(0.1), 2)
    assert not two.marked  # step 2 decoded an end-of-text: the pair into step 3 is the tail
    # step 3 is full: it recomputes every row (its change is theirs) and reuses none
    assert (three.recomputed, three.reused, three.full, three.tail, three.block_start) == (
        pytest.approx(0.3), None, True, True, True)
    assert three.change == pytest.approx(0.3) and three.since_full == 3


def test_links_curve_and_sentence_by_hand():
    pairs = step_pairs(EVENTS, {EOS})
    found = links(pairs)
    assert found["change_all"]["n"] == 3 and found["change_unmarked"]["n"] == 2
    assert found["reused_all"]["n"] == 2 and found["reused_unmarked"]["spearman"] == pytest.approx(-1.0)
    assert found["recomputed_unmarked"]["spearman"] == pytest.approx(1.0)
    assert staleness_curve(pairs) == {1: pytest.approx(0.02), 2: pytest.approx(0.04)}  # marked pairs left out
    analysis = drift_analysis(EVENTS, {EOS})
    assert analysis["marked"] == {"tail": 1, "block_start": 0} and analysis["links"] == found
    assert analysis["tail"] == {"share": pytest.approx(1 / 3), "staleness": pytest.approx(0.06),
                                "staleness_elsewhere": pytest.approx(0.03)}
    assert analysis["summary"] == "Too few steps yet (2) to say what entropy predicts here."
    # the rows recomputed are correlated over the pairs into a partial step: a full step's every-row mean is
    # another quantity (the scatter shows it apart)
    assert found["recomputed_all"]["n"] == 2 and found["recomputed_all"]["max_entropy"] == 0.9
    assert full_next(pairs) == {"n": 0, "change": None, "others": pytest.approx((0.325 + 0.3) / 2)}
    link = {"n": 400, "spearman": 0.34, "max_entropy": 2.0}  # chance alone: |rho| < 2 / sqrt(400) = 0.1
    assert [verdict({**link, "spearman": r}) for r in (0.34, 0.2996, 0.17, -0.2, -0.5)] == [
        "tracks", "tracks", "weakly tracks", "weakly runs against", "runs against"]  # 0.2996 is shown as +0.30
    assert verdict({**link, "spearman": 0.094}) == "shows no link to (+0.09 over 400 steps is within chance)"
    assert verdict({**link, "n": 20}) == "shows no link to (+0.34 over 20 steps is within chance)"  # 2/sqrt(20)=0.45
    assert verdict({**link, "n": 7}) == "cannot yet say whether it tracks (7 steps)"
    assert verdict({**link, "n": 1}) == "cannot yet say whether it tracks (1 step)"
    assert verdict({**link, "spearman": 0.89, "max_entropy": 0.05}) == (
        "cannot say whether it tracks: every entropy is below 0.2 nats, too narrow a range (Spearman +0.89 over 400 "
        "steps)")
    split = {"recomputed_unmarked": link, "reused_unmarked": {**link, "n": 300, "spearman": -0.01},
             "change_unmarked": {**link, "n": 500, "spearman": 0.3}, "reused_all": {"n": 45}}
    assert what_holds(split) == (
        "Here the entropy of what a step decodes tracks how far the rows the next step recomputes move (Spearman "
        "+0.34 over 400 partial steps, entropies up to 2.0 nats), and shows no link to (-0.01 over 300 steps is "
        "within chance) how far the rows it reuses from the cache move.")
    assert what_holds(split, {"n": 12, "change": 0.0512, "others": 0.0204}).endswith(
        "move. After the 12 steps followed by a full step, every row moved 0.0512 on average, against 0.0204 after "
        "the others.")
    assert "After the step followed by a full step, every row moved 0.0512" in what_holds(
        split, {"n": 1, "change": 0.0512, "others": 0.0204})
    assert what_holds({**split, "reused_unmarked": {"n": 0, "spearman": math.nan, "max_entropy": 0.0},
                       "reused_all": {"n": 0}}) == (
        "Here the entropy of what a step decodes tracks how far the next step's K/V move (Spearman +0.30 over 500 "
        "steps, entropies up to 2.0 nats).")
    assert volatility_curve(EVENTS) == {1: pytest.approx(0.5), 2: pytest.approx(0.1)}


def test_drift_values_are_finite_and_non_negative():
    """Dream-style model under EntropyCache: every drift value is a finite, non-negative number."""
    events = run(tiny_model("dream"), make_policy("entropy", tau=0.5, k=1), probe=True)
    for e in events[1:]:
        assert all(c >= -1e-6 and math.isfinite(c) for c in e.drift_cos)
        assert all(v >= 0 for v in e.drift_l2)
