"""The static path (core/passes.py) on the CPU: the padded, fixed-shape passes a GPU replays from CUDA
graphs change nothing, for every policy, and their buffers are reused and released as documented."""

import math

import pytest
import torch
from tiny_models import tiny_model

import core.passes
from core.config import DecodeConfig
from core.decoder import decode
from core.exact_passes import Passes
from core.passes import (
    MAX_IDLE_WORKSPACES,
    ROW_BUCKETS,
    Workspace,
    bucket,
    capture_failure,
    idle_workspaces,
    passes_for,
    release_graphs,
    uses_static_passes,
)
from core.policies import POLICIES, CachePolicy, Plan, make_policy
from core.warmup import capture_ahead

PROMPT = [3, 9, 4, 12, 7, 30]
SETTINGS = {
    "one token per step": dict(gen_len=16, block_len=8),
    "two tokens per step": dict(gen_len=16, block_len=8, steps=8),
    "threshold": dict(gen_len=16, block_len=8, threshold=0.3),
    "sampling": dict(gen_len=16, block_len=16, temperature=1.0, seed=7),
    "dream schedule, top-p": dict(gen_len=16, block_len=8, steps=6, schedule="dream", top_p=0.9, alg="topk_margin"),
}
# Each policy with settings that make it compute partial passes of many sizes.
POLICY_PARAMS = {"none": {}, "entropy": {"tau": 0.5, "k": 2}, "dual": {}, "prefix": {},
                 "dkv-cache": {"refresh_every": 3}, "dllm-cache": {"prompt_every": 5, "response_every": 3},
                 "d2cache": {}, "elastic": {}}


def test_buckets_pad_a_few_rows_by_at_most_half_and_never_past_the_sequence():
    assert ROW_BUCKETS[:8] == (8, 12, 16, 24, 32, 48, 64, 96)
    assert [bucket(n, 1000) for n in (1, 8, 9, 13, 33, 34, 600)] == [8, 8, 12, 16, 48, 48, 768]
    assert bucket(600, 601) == 601 and bucket(5, 6) == 6
    assert all(b < bucket(b + 1, 10**6) <= 1.5 * b for b in ROW_BUCKETS if b >= 8 and b < ROW_BUCKETS[-1])


def test_the_switch_is_checked_and_auto_means_off_on_the_cpu():
    model = tiny_model()
    assert not uses_static_passes("auto", model) and uses_static_passes("on", model)
    assert not uses_static_passes("off", model)
    with pytest.raises(ValueError, match="graphs must be one of auto, on, off, got 'yes'"):
        DecodeConfig(graphs="yes")
    with pytest.raises(ValueError, match="graphs must be one of auto, on, off, got 'ON'"):
        list(decode(model, PROMPT, make_policy("none"), DecodeConfig(graphs="ON")))


def _cache_copy(passes: Passes) -> list[torch.Tensor]:
    return [t.clone() for t in passes.cache.k + passes.cache.v]


@pytest.mark.parametrize("n_rows", [1, 3, 9, 20])
def test_a_padded_pass_computes_what_the_exact_rows_compute_and_touches_no_other_row(family, n_rows):
    model = tiny_model(family).double()
    length, block = 28, 8
    eager, static = Passes(model, length), Workspace(model, length, block, pool=None)
    prompt = torch.randint(0, 40, (20,)).tolist()
    for passes in (eager, static):
        passes.start(prompt)
        passes.run(model, None, [20])  # a full pass fills the cache
    before = _cache_copy(static)
    rows = sorted(torch.randperm(length)[:n_rows].tolist())
    needed = rows[-min(3, n_rows):]
    a, b = eager.run(model, rows, needed), static.run(model, rows, needed)
    assert a.shape == b.shape == (len(needed), model.config.vocab_size)
    assert torch.allclose(a, b, rtol=0, atol=1e-5)  # float32 logits of a float64 model
    untouched = [r for r in range(length) if r not in rows]
    for old, new_static, new_eager in zip(before, _cache_copy(static), _cache_copy(eager)):
        assert torch.equal(new_static[:, :, untouched], old[:, :, untouched])  # padding wrote nothing else
        assert torch.allclose(new_static[:, :, rows], new_eager[:, :, rows], rtol=0, atol=1e-12)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("name", sorted(POLICY_PARAMS))
def test_the_static_path_decodes_the_same_tokens_as_the_eager_one(family, name, setting):
    """Float64 models: the two paths' sums differ only in rounding, ~1e-16, far below any margin a
    decision depends on, so token-identical output is the property, not luck."""
    model = tiny_model(family).double()
    config = DecodeConfig(**SETTINGS[setting], stop_at_eos=False)
    eager = list(decode(model, PROMPT, make_policy(name, **POLICY_PARAMS[name]), config))
    static = list(decode(model, PROMPT, make_policy(name, **POLICY_PARAMS[name]),
                         DecodeConfig(**SETTINGS[setting], stop_at_eos=False, graphs="on")))
    assert [(e.tokens, e.unmasked, e.full, e.rows, e.layer_rows) for e in static] == \
        [(e.tokens, e.unmasked, e.full, e.rows, e.layer_rows) for e in eager]
    for a, b in zip(eager, static):
        assert a.reason == b.reason
        assert all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(a.entropies, b.entropies))
        assert b.capture_s == 0.0 and b.totals.capture_s == 0.0  # nothing is captured on the CPU


def test_every_policy_is_covered():
    assert set(POLICY_PARAMS) == set(POLICIES)


def test_the_embedded_model_decodes_the_same_with_its_passes_padded():
    """The model in front of a visitor, on a word problem and a story; in float64, like the tiny models,
    so that equal tokens are the property and not float32 rounding luck (in float32 a padded pass's
    logits agree to ~1e-5: test_a_padded_pass_computes_what_the_exact_rows_compute...)."""
    import core
    from evaluation.tasks import held_out

    model, tokenizer = core.load_model()
    model.double()
    for item in held_out("words", 1) + held_out("stories", 1):
        ids = core.chat_prompt_ids(tokenizer, item.prompt)
        for name in ("none", "entropy"):
            eager, static = (list(decode(model, ids, make_policy(name), DecodeConfig(gen_len=32, graphs=graphs)))
                             for graphs in ("off", "on"))
            assert [(e.tokens, e.full) for e in static] == [(e.tokens, e.full) for e in eager], (item.task, name)
            assert not all(e.full for e in static) or name == "none"


class Recorder:
    """Records the row count and logit-row count of every forward the model runs."""

    def __init__(self, model):
        self.shapes = []
        model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        ids, cache, rows, logit_rows = args
        self.shapes.append((ids.shape[1], None if logit_rows is None else logit_rows.numel()))


def test_every_pass_of_the_static_path_has_a_fixed_shape():
    model = tiny_model()
    recorder = Recorder(model)
    config = DecodeConfig(gen_len=32, block_len=8, stop_at_eos=False, graphs="on")
    length = len(PROMPT) + 32
    for name in ("none", "entropy", "prefix", "dkv-cache"):
        list(decode(model, PROMPT, make_policy(name, **POLICY_PARAMS[name]), config))
    rows = {r for r, _ in recorder.shapes}
    assert {n for _, n in recorder.shapes} == {8}  # the logit rows: always the block length
    assert length in rows and rows - {length} <= set(ROW_BUCKETS) and len(rows) > 2
    recorder.shapes.clear()
    list(decode(model, PROMPT, make_policy("dkv-cache", refresh_every=3), DecodeConfig(gen_len=32, block_len=8)))
    assert any(r not in ROW_BUCKETS and r != length for r, _ in recorder.shapes)  # off: the exact rows


def test_the_static_path_reads_every_entropy_out_with_the_token_choice(monkeypatch):
    """A GPU step waits for the device once before the decision: on the static path the entropies of
    every masked row come with what was picked; eagerly only the picked rows' are computed, after it."""
    import core.decoder

    model = tiny_model()
    rows_given: list[int] = []
    real = core.decoder.entropy
    monkeypatch.setattr(core.decoder, "entropy", lambda probs: rows_given.append(len(probs)) or real(probs))
    config = dict(gen_len=16, block_len=8, stop_at_eos=False)
    static = list(decode(model, PROMPT, make_policy("entropy"), DecodeConfig(**config, graphs="on")))
    assert rows_given == [8 - e.step % 8 for e in static]  # one token a step: the block's masks left
    rows_given.clear()
    eager = list(decode(model, PROMPT, make_policy("entropy"), DecodeConfig(**config)))
    assert rows_given == [1] * 16 and [e.tokens for e in eager] == [e.tokens for e in static]


STATIC = DecodeConfig(gen_len=16, block_len=8, graphs="on")  # the static path, wherever it runs
EAGER = DecodeConfig(gen_len=16, block_len=8)  # on a CPU (graphs auto): every pass eagerly over its exact rows


@pytest.fixture
def model():
    """A tiny model that holds no workspace yet: what the tests below count starts at none."""
    model = tiny_model()
    release_graphs(model)
    return model


class PartialFirst(CachePolicy):
    """A partial first step: it reads whatever the cache holds, so a reused cache must start as a new one."""

    name = "partial-first"

    def plan(self, ctx):
        return Plan([ctx.block_start], "partial") if ctx.step == 0 else Plan(None, "full")


def test_a_workspace_is_reused_by_the_next_decode_of_its_length_and_starts_clean(model):
    list(decode(model, PROMPT, make_policy("entropy"), STATIC))
    (first,) = idle_workspaces(model)
    other_prompt = [5, 5, 2, 8, 1, 17]  # the same length
    again = list(decode(model, other_prompt, PartialFirst(), STATIC))
    assert idle_workspaces(model) == [first]  # the same buffers (and graphs, on a GPU) served it
    assert [e.tokens for e in again] == [e.tokens for e in decode(model, other_prompt, PartialFirst(), EAGER)]


def test_decodes_in_flight_at_once_get_their_own_workspaces(model):
    """A race interleaves two decodes of one length: each needs its own cache."""
    lanes = [decode(model, PROMPT, make_policy("none"), STATIC), decode(model, PROMPT, make_policy("entropy"), STATIC)]
    raced = [[], []]
    while any(lane is not None for lane in lanes):
        for i, lane in enumerate(lanes):
            event = next(lane, None) if lane is not None else None
            if event is None:
                lanes[i] = None
            else:
                raced[i].append(event.tokens)
    assert raced[0] == [e.tokens for e in decode(model, PROMPT, make_policy("none"), EAGER)]
    assert raced[1] == [e.tokens for e in decode(model, PROMPT, make_policy("entropy"), EAGER)]
    assert len(idle_workspaces(model)) == 2


def test_workspaces_go_back_when_a_decode_is_closed_early_and_few_are_kept(model):
    steps = decode(model, PROMPT, make_policy("entropy"), STATIC)
    next(steps)
    assert idle_workspaces(model) == []  # in use
    steps.close()  # a cancelled race
    assert len(idle_workspaces(model)) == 1
    for gen_len in (8, 16, 24, 32, 40, 48):  # six lengths: only the most recent few stay
        list(decode(model, PROMPT, make_policy("none"), DecodeConfig(gen_len=gen_len, block_len=8, graphs="on")))
    kept = idle_workspaces(model)
    assert [w.length for w in kept] == [len(PROMPT) + g for g in (8, 16, 24, 32, 40, 48)][-MAX_IDLE_WORKSPACES:]
    release_graphs(model)
    assert idle_workspaces(model) == []


def test_a_workspace_holds_its_buffers_for_every_decode(model):
    """Fixed addresses: what a graph reads (tokens, cache, indices) is never reallocated by a decode."""
    with passes_for(model, len(PROMPT) + 16, 8, "on") as ws:
        addresses = [t.data_ptr() for t in (ws.tokens, ws.index, *ws.cache.k, *ws.cache.v)]
    for name in ("none", "entropy", "dkv-cache"):
        list(decode(model, PROMPT, make_policy(name, **POLICY_PARAMS[name]), STATIC))
    (ws,) = idle_workspaces(model)
    assert [t.data_ptr() for t in (ws.tokens, ws.index, *ws.cache.k, *ws.cache.v)] == addresses


def test_capturing_ahead_readies_a_workspace_per_lane_for_the_next_race(model):
    length = len(PROMPT) + 16
    assert capture_ahead(model, length, 8) == 0.0  # auto: nothing on a CPU
    assert idle_workspaces(model) == []
    assert capture_ahead(model, model.config.max_seq_len + 1, 8, "on") == 0.0  # no decode takes that length
    assert idle_workspaces(model) == []
    assert capture_ahead(model, length, 8, "on") == 0.0  # buffers, but no graphs on a CPU
    ready = idle_workspaces(model)
    assert [w.length for w in ready] == [length, length]
    lanes = [decode(model, PROMPT, make_policy("none"), STATIC), decode(model, PROMPT, make_policy("entropy"), STATIC)]
    for lane in lanes:
        next(lane)
    assert idle_workspaces(model) == []  # both lanes took the workspaces made ready for them
    for lane in lanes:
        lane.close()
    assert sorted(map(id, idle_workspaces(model))) == sorted(map(id, ready))


def test_a_capture_that_fails_leaves_every_pass_of_the_model_eager_and_says_why(monkeypatch, family):
    """As on one GPU (a pool, captures attempted) with a device that refuses to capture: the decode runs
    the same padded passes eagerly, the first failure is kept for the model, and no capture is tried
    again until its graphs are released."""
    model = tiny_model(family).double()
    policy = {"tau": 0.5, "k": 2}
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    expected = [(e.tokens, e.rows) for e in decode(model, PROMPT, make_policy("entropy", **policy), config)]
    tried = []

    def refuse(self, model, size):
        tried.append(size)
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nCompile with ...")

    monkeypatch.setattr(core.passes, "single_cuda_device", lambda model: next(model.parameters()).device)
    monkeypatch.setattr(core.passes, "_graph_pool", object)
    monkeypatch.setattr(Workspace, "_capture", refuse)
    try:
        assert uses_static_passes("auto", model)
        got = [(e.tokens, e.rows, e.capture_s) for e in decode(model, PROMPT, make_policy("entropy", **policy), config)]
        assert [g[:2] for g in got] == expected and all(g[2] == 0 for g in got)
        assert tried == [None]  # the first pass's capture failed; none was tried after it
        assert capture_failure(model) == "RuntimeError: CUDA error: operation not permitted when stream is capturing"
        assert capture_ahead(model, len(PROMPT) + 16, 8) == 0.0 and tried == [None]
    finally:
        release_graphs(model)
    assert capture_failure(model) == ""  # released: the next decode tries again
