"""Policies: exact rows for hand-made decode histories, and the Dream logit shift."""

import math
import re

import pytest
import torch
from tiny_models import tiny_model

from core.config import DecodeConfig
from core.decoder import decode
from core.policies import POLICIES, CachePolicy, Outcome, Plan, StepContext, make_policy, register

P, GEN, BLOCK = 4, 12, 4  # prompt 0..3; blocks 4..7, 8..11, 12..15


def context(step, block, block_step, masked_positions, decoded):
    """decoded: {position: step it was unmasked}."""
    order = sorted(decoded, key=lambda pos: (decoded[pos], pos))
    start = P + block * BLOCK
    block_masked = tuple(sorted(pos for pos in masked_positions if start <= pos < start + BLOCK))
    return StepContext(step, block, block_step, start, start + BLOCK, P, P + GEN, block_masked, order)


# Block 1 (positions 8..11) in progress: 8 decoded at step 5, 10 at step 6; 9, 11 and block 2 masked.
MID = context(7, 1, 2, [9, 11, 12, 13, 14, 15], {4: 0, 5: 1, 6: 2, 7: 3, 8: 5, 10: 6})


def rows(plan: Plan):
    return None if plan.rows is None else sorted(plan.rows)


def test_entropy_partial_rows_are_block_masks_plus_k_recent():
    policy = make_policy("entropy", tau=0.5, k=2)
    policy.observe(MID, Outcome((10,), (0.1,)))
    assert rows(policy.plan(MID)) == [8, 9, 10, 11]  # masked 9, 11 + recent 10 (step 6), 8 (step 5)
    policy = make_policy("entropy", tau=0.5, k=3)
    policy.observe(MID, Outcome((10,), (0.1,)))
    assert rows(policy.plan(MID)) == [7, 8, 9, 10, 11]  # k=3 adds 7 (step 3)
    policy = make_policy("entropy", tau=0.5, k=0)
    policy.observe(MID, Outcome((10,), (0.1,)))
    assert rows(policy.plan(MID)) == [9, 10, 11]  # k=0: still the token of the last step (10), once


def test_entropy_with_the_response_scope_recomputes_every_masked_row_of_the_response():
    policy = make_policy("entropy", tau=0.5, k=2, scope="response")
    policy.observe(MID, Outcome((10,), (0.1,)))
    assert rows(policy.plan(MID)) == list(range(8, 16))  # masked 9, 11, 12..15 + recent 10, 8
    policy = make_policy("entropy", tau=0.5, k=0, scope="response")
    policy.observe(MID, Outcome((10,), (0.1,)))
    assert rows(policy.plan(MID)) == [9, 10, 11, 12, 13, 14, 15]
    with pytest.raises(ValueError, match=re.escape("scope must be one of block, response, got 'all'")):
        make_policy("entropy", scope="all")
    assert make_policy("entropy", scope="response").describe() == "entropy(tau=1.0, k=2, scope=response)"
    assert make_policy("entropy", tau=0.5).describe() == "entropy(tau=0.5, k=2)"  # the default scope unsaid


def test_entropy_goes_full_after_an_uncertain_step_and_at_block_start():
    policy = make_policy("entropy", tau=0.5, k=2)
    policy.observe(MID, Outcome((10, 9), (0.2, 0.7)))  # max 0.7 > tau
    assert rows(policy.plan(MID)) is None
    policy.observe(MID, Outcome((9,), (0.5,)))  # 0.5 is not above tau
    assert rows(policy.plan(MID)) is not None
    start = context(8, 2, 0, [12, 13, 14, 15], {})
    assert rows(policy.plan(start)) is None
    assert rows(make_policy("entropy").plan(MID)) is None  # fresh policy: first step is full


def test_entropy_recomputes_every_token_of_a_parallel_step_once():
    """A parallel step can unmask more than k tokens: each is recomputed at the next partial step."""
    policy = make_policy("entropy", tau=0.5, k=1)
    policy.observe(MID, Outcome((5, 6, 10), (0.1, 0.1, 0.1)))
    assert rows(policy.plan(MID)) == [5, 6, 9, 10, 11]  # masked 9, 11; last step 5, 6, 10; k=1 recent: 10


def test_dual_prefix_rows():
    assert rows(make_policy("dual").plan(MID)) == [8, 9, 10, 11]
    assert rows(make_policy("prefix").plan(MID)) == list(range(8, 16))
    assert rows(make_policy("dual").plan(context(4, 1, 0, [8, 9], {}))) is None


def test_dkv_cache_computes_what_was_masked_when_the_last_step_began():
    """Tokens enter the cache one step late: 10 (unmasked in the last step) is computed once more,
    8 (the step before) is not; every masked row of every block is computed."""
    policy = make_policy("dkv-cache", refresh_every=4)
    policy.observe(MID, Outcome((10,), (0.1,)))
    assert rows(policy.plan(MID)) == [9, 10, 11, 12, 13, 14, 15]  # block step 2
    assert rows(policy.plan(context(7, 1, 1, [9, 11], {}))) is None  # the first two steps of a block
    assert rows(policy.plan(context(7, 1, 4, [9, 11], {}))) is None  # every refresh_every-th step


def test_dllm_cache_refresh_schedule():
    policy = make_policy("dllm-cache", prompt_every=7, response_every=3, rho=0.5)
    for step, prompt, response in [(7, True, False), (9, False, True), (21, True, True), (8, False, False)]:
        hook = policy.plan(context(step, 1, 2, [9, 11], {})).hook
        assert (hook.refresh_prompt, hook.refresh_response, hook.rho) == (prompt, response, 0.5)


def test_decoder_counts_rows_per_step_exactly():
    """On a real decode, every partial step computes exactly masked-in-block + k recent rows."""
    model = tiny_model()
    events = list(
        decode(
            model,
            [5, 6, 7],
            make_policy("entropy", tau=math.inf, k=1),
            DecodeConfig(gen_len=8, block_len=4, stop_at_eos=False),
        )
    )
    # tau = inf: only block starts are full. Block of 4, one token per step.
    assert [e.full for e in events] == [True, False, False, False] * 2
    assert [len(e.rows) for e in events] == [11, 3 + 1, 2 + 1, 1 + 1] * 2
    for e in events:
        assert e.layer_rows == [len(e.rows)] * model.config.n_layers


@pytest.mark.parametrize("family, shift", [("llada", 0), ("dream", 1)])
def test_dream_shift_is_honoured_in_partial_passes(family, shift):
    """Dream reads position i's logits at row i-1, so a partial pass must compute row i-1 of every
    masked position; LLaDA reads row i. With k=0 the rows are exactly those, plus the row unmasked
    in the previous step."""
    model = tiny_model(family)
    prompt = [5, 6, 7]
    cfg = DecodeConfig(gen_len=8, block_len=8, stop_at_eos=False)
    events = list(decode(model, prompt, make_policy("entropy", tau=math.inf, k=0), cfg))
    partial = [e for e in events if not e.full]
    assert len(partial) == 7
    for before, e in zip(events, events[1:]):
        masked_after = {len(prompt) + i for i, t in enumerate(e.tokens) if t == model.config.mask_token_id}
        masked_before = masked_after | set(e.unmasked)
        expected = masked_before | {m - shift for m in masked_before} | set(before.unmasked)
        assert sorted(e.rows) == sorted(expected)


@pytest.mark.parametrize("name", ["dual", "prefix"])
def test_dual_and_prefix_on_dream_compute_the_block_and_the_rows_their_logits_come_from(name):
    """Our choice for Dream (docs/ALGORITHM.md): a partial step computes the block's rows (dual; prefix: and
    every row after it) plus the rows whose logits the decoder reads, row i-1 of each masked position, so
    row block_start-1 while the block's first position is masked. d2Cache's PrefixCache shifts the rows left
    instead (the block's last row is never recomputed); Fast-dLLM's Dream decoder is a decoding rule apart."""
    model = tiny_model("dream")
    prompt = [5, 6, 7]
    events = list(decode(model, prompt, make_policy(name), DecodeConfig(gen_len=8, block_len=4, stop_at_eos=False)))
    length = len(prompt) + 8
    starts = []
    for before, e in zip(events, events[1:]):
        if e.full:
            continue
        start = len(prompt) + 4 * e.block
        first_masked = before.tokens[start - len(prompt)] == model.config.mask_token_id
        end = start + 4 if name == "dual" else length
        assert e.rows == list(range(start - first_masked, end))
        starts.append(first_masked)
    assert True in starts and False in starts  # both cases met


def test_policy_can_be_added_without_touching_the_decoder():
    @register("every-other")
    class EveryOther(CachePolicy):
        name = "every-other"

        def plan(self, ctx):
            if ctx.step % 2 == 0:
                return Plan(None, "even step")
            return Plan(list(range(ctx.block_start, ctx.block_end)), "odd step: block")

    try:
        events = list(
            decode(
                tiny_model(),
                [5, 6],
                make_policy("every-other"),
                DecodeConfig(gen_len=8, block_len=8, stop_at_eos=False),
            )
        )
        assert [e.full for e in events] == [True, False] * 4
    finally:
        POLICIES.pop("every-other")


class BlockRows(CachePolicy):
    """dual's plan, with the rows in whatever container `make` builds from a range."""

    name = "block-rows"

    def __init__(self, make):
        self.make = make

    def plan(self, ctx):
        if ctx.block_step == 0:
            return Plan(None, "full: first step of the block")
        return Plan(self.make(range(ctx.block_start, ctx.block_end)), "partial: current block")


@pytest.mark.parametrize("make", [list, tuple, set, lambda r: r, lambda r: (i for i in r), torch.tensor])
def test_plan_rows_may_be_any_iterable_of_integers(make):
    cfg = DecodeConfig(gen_len=12, block_len=4, stop_at_eos=False)
    expected = list(decode(tiny_model(), [5, 6, 7, 8], make_policy("dual"), cfg))
    events = list(decode(tiny_model(), [5, 6, 7, 8], BlockRows(make), cfg))
    assert [(e.tokens, e.rows) for e in events] == [(e.tokens, e.rows) for e in expected]
    assert all(type(row) is int for e in events for row in e.rows)  # plain ints: events stay JSON-able


def test_a_plan_of_non_integers_is_refused():
    halves = BlockRows(lambda r: [i + 0.5 for i in r])
    events = decode(tiny_model(), [5, 6, 7, 8], halves, DecodeConfig(gen_len=4, block_len=4))
    assert next(events).full
    with pytest.raises(ValueError, match=r"the policy's rows must be integer positions, got \[4\.5, 5\.5"):
        next(events)


@pytest.mark.parametrize("bad_row", [-1, 16])
def test_a_plan_outside_the_sequence_is_refused(bad_row):
    class OutOfRange(CachePolicy):
        name = "out-of-range"

        def plan(self, ctx):
            return Plan(None, "full") if ctx.step == 0 else Plan([bad_row], "broken")

    events = decode(tiny_model(), [5, 6, 7, 8], OutOfRange(), DecodeConfig(gen_len=12, block_len=4, stop_at_eos=False))
    assert next(events).full
    with pytest.raises(ValueError, match=rf"the policy planned row {bad_row}, outside the sequence's rows 0\.\.15"):
        next(events)


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("cache-all", {}, "unknown policy 'cache-all'"),
        ("entropy", {"tau": float("nan")}, "tau must be a number"),
        ("entropy", {"k": -1}, "k must be a non-negative integer"),
        ("entropy", {"gamma": 1}, "bad parameters for policy 'entropy'"),
        ("dllm-cache", {"prompt_every": 0}, "prompt_every must be a positive integer"),
        ("dllm-cache", {"rho": 0.0}, "rho must be a number in (0, 1], got 0.0"),
        ("dllm-cache", {"rho": 1.5}, "rho must be a number in (0, 1], got 1.5"),
        ("dkv-cache", {"refresh_every": -2}, "refresh_every must be a positive integer, got -2"),
        ("elastic", {"gamma": 0}, "gamma must be a number in (0, 1], got 0"),
        ("elastic", {"window": 0}, "window must be a positive integer, got 0"),
        ("d2cache", {"rollout_p": -0.1}, "rollout_p must be a number in [0, 1], got -0.1"),
    ],
)
def test_bad_policy_requests(name, params, message):
    with pytest.raises(ValueError) as e:
        make_policy(name, **params)
    assert message in str(e.value)


def test_declared_parameters_are_checked_and_set():
    """A policy declares its parameters once; the base class checks values against the declaration,
    fills defaults and sets attributes, and `register` names the class."""
    from core.params import Param

    @register("every-n")
    class EveryN(CachePolicy):
        parameters = (Param("n", int, 3, low=1, high=8, help="steps between full forwards"),
                      Param("share", float, 0.5, low=0.0, high=1.0))

    try:
        assert EveryN.name == "every-n" and POLICIES["every-n"] is EveryN
        policy = make_policy("every-n", n=5)
        assert (policy.n, policy.share) == (5, 0.5) and type(policy.n) is int
        assert policy.params() == {"n": 5, "share": 0.5} and policy.describe() == "every-n(n=5, share=0.5)"
        assert make_policy("every-n", n=torch.tensor(2)).n == 2  # a 0-d tensor is a number too
        for params, message in [
            ({"n": 0}, "n must be an integer in [1, 8], got 0"),
            ({"n": 2.5}, "n must be an integer in [1, 8], got 2.5"),
            ({"n": "3"}, "n must be an integer in [1, 8], got '3'"),
            ({"n": True}, "n must be an integer in [1, 8], got True"),
            ({"share": float("nan")}, "share must be a number in [0, 1], got NaN"),
            ({"share": 1.5}, "share must be a number in [0, 1], got 1.5"),
            ({"share": 10**400}, f"share must be a number in [0, 1], got {'1' + '0' * 59}..."),  # past a float
            ({"n": 10**5000}, "n must be an integer in [1, 8], got an integer too long to write out"),
            ({"n": "3" * 1000}, f"n must be an integer in [1, 8], got '{'3' * 59}..."),  # a client may send a megabyte
            ({"rho": 1}, "bad parameters for policy 'every-n': no parameter 'rho' (it has: n, share)"),
        ]:
            with pytest.raises(ValueError) as e:
                make_policy("every-n", **params)
            assert str(e.value) == message
    finally:
        POLICIES.pop("every-n")
    with pytest.raises(ValueError, match=r"k must be an integer in \[0, 4\], got 9"):
        Param("k", int, 9, low=0, high=4)  # a default outside its own range is a bug in the declaration


def test_policies_cannot_edit_the_decode_order():
    """StepContext.decode_order is the decoder's record: a policy gets a read-only copy."""
    seen = []

    class Greedy(CachePolicy):
        def plan(self, ctx):
            seen.append(ctx.decode_order)
            with pytest.raises(AttributeError):
                ctx.decode_order.append(0)
            return Plan(None, "full")

    events = list(decode(tiny_model(), [5, 6], Greedy(), DecodeConfig(gen_len=4, block_len=4, stop_at_eos=False)))
    assert seen == [tuple(pos for e in events[:i] for pos in e.unmasked) for i in range(len(events))]


# Each policy with parameters, at its "refresh everything" setting: the exact decoder's tokens must
# come out. (dual and prefix are fixed schedules, without parameters. Elastic-Cache has no such
# setting: the layer whose drift triggers a refresh is never itself recomputed; tests/core/policies/test_elastic.py.)
REFRESH_ALL = {
    "entropy": {"tau": -1.0},
    "dllm-cache": {"prompt_every": 1, "response_every": 1},
    "dkv-cache": {"refresh_every": 1},
    "d2cache": {"rollout_p": 1.0, "inflate_w": 64},  # no refresh: every row is chosen at every step instead
}


@pytest.mark.parametrize("name", sorted(REFRESH_ALL))
def test_refresh_everything_gives_the_exact_decoders_tokens(name, family):
    model = tiny_model(family)
    cfg = DecodeConfig(gen_len=16, block_len=4, stop_at_eos=False)
    exact = list(decode(model, [5, 6, 7, 8, 9], make_policy("none"), cfg))
    events = list(decode(model, [5, 6, 7, 8, 9], make_policy(name, **REFRESH_ALL[name]), cfg))
    assert [e.tokens for e in events] == [e.tokens for e in exact]
    assert all(len(e.rows) == e.prompt_len + len(e.tokens) for e in events)


def test_every_policy_is_listed_for_tables_and_has_a_refresh_case():
    from core.policies import TABLE_ORDER

    assert sorted(TABLE_ORDER) == sorted(POLICIES)
    assert set(REFRESH_ALL) | {"elastic"} == {name for name, cls in POLICIES.items() if cls.parameters}


def test_dllm_cache_computes_different_rows_per_layer():
    """Layer 0 always computes every row; the others only the chosen share, between refreshes."""
    model = tiny_model(n_layers=3)
    cfg = DecodeConfig(gen_len=16, block_len=4, stop_at_eos=False)
    events = list(decode(model, [5, 6, 7, 8, 9], make_policy("dllm-cache", prompt_every=50, response_every=5,
                                                                rho=0.25), cfg))
    assert events[0].layer_rows == [21, 21, 21] and events[0].full
    assert events[1].layer_rows == [21, 4, 4] and not events[1].full  # int(16 * 0.25) response rows
    assert events[5].layer_rows == [21, 16, 16]  # step 5: the response rows refreshed
    assert events[-1].totals.rows_computed == sum(sum(e.layer_rows) for e in events)
