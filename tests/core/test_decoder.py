"""The denoising loop: exactness of the always-full cache, determinism, events, bad input."""

import gc
import math
import time

import pytest
import torch
from busy import busy_for
from tiny_models import tiny_model

from core.config import DecodeConfig
from core.decoder import decode, generate
from core.device import clock as device_clock
from core.policies import CachePolicy, Plan, make_policy

PROMPT = [3, 9, 4, 12, 7, 30]


def run(model, policy, **cfg):
    return list(decode(model, PROMPT, policy, DecodeConfig(**cfg)))


@pytest.mark.parametrize(
    "cfg",
    [
        dict(gen_len=16, block_len=8, stop_at_eos=False),
        dict(gen_len=16, block_len=4, steps=8, stop_at_eos=False),
        dict(gen_len=16, block_len=8, threshold=0.3, stop_at_eos=False),
        dict(gen_len=16, block_len=16, temperature=1.0, seed=7, stop_at_eos=False),
    ],
)
def test_entropy_with_tau_minus_inf_equals_no_cache_every_step(family, cfg):
    model = tiny_model(family)
    exact = run(model, make_policy("none"), **cfg)
    always_full = run(model, make_policy("entropy", tau=-math.inf, k=2), **cfg)
    assert len(exact) == len(always_full)
    for a, b in zip(exact, always_full):
        assert (a.tokens, a.unmasked) == (b.tokens, b.unmasked)
        assert b.full


class EveryRowPartial(CachePolicy):
    """Partial passes that list every row: they must reproduce the exact decoder, which checks that
    partial passes write fresh K/V and read logits from the right rows (Dream's shift)."""

    name = "every-row-partial"

    def plan(self, ctx):
        return Plan(list(range(ctx.length)), "every row, as a partial pass")


@pytest.mark.parametrize("threshold", [None, 0.3])
def test_partial_passes_over_every_row_equal_no_cache(family, threshold):
    model = tiny_model(family)
    cfg = dict(gen_len=16, block_len=8, threshold=threshold, stop_at_eos=False)
    exact = run(model, make_policy("none"), **cfg)
    partial = run(model, EveryRowPartial(), **cfg)
    assert [e.tokens for e in partial] == [e.tokens for e in exact]
    assert not any(e.full for e in partial)


def test_same_seed_repeats_exactly(family):
    model = tiny_model(family)
    a = run(model, make_policy("entropy"), gen_len=16, block_len=8, temperature=0.8, seed=3)
    b = run(model, make_policy("entropy"), gen_len=16, block_len=8, temperature=0.8, seed=3)
    assert [e.tokens for e in a] == [e.tokens for e in b]
    assert [e.rows for e in a] == [e.rows for e in b]
    c = run(model, make_policy("entropy"), gen_len=16, block_len=8, temperature=0.8, seed=4)
    assert [e.tokens for e in a] != [e.tokens for e in c]


def test_one_event_per_step_and_totals():
    model = tiny_model()
    events = run(model, make_policy("dual"), gen_len=16, block_len=8, steps=8, stop_at_eos=False)
    assert len(events) == 8 and [e.step for e in events] == list(range(8))
    assert [e.done for e in events] == [False] * 7 + [True]
    assert all(len(e.unmasked) == 2 for e in events)  # 16 tokens in 8 steps
    last = events[-1]
    assert model.config.mask_token_id not in last.tokens
    t = last.totals
    assert t.steps == 8 and t.full_steps == 2  # one full step per block
    length = len(PROMPT) + 16
    assert t.rows_full == 8 * length * model.config.n_layers
    assert t.rows_computed == model.config.n_layers * (2 * length + 6 * 8)  # 3 partial steps x 8 block rows, x2
    assert t.compute_s == pytest.approx(sum(e.compute_s for e in events))
    assert 0 < t.decision_s < t.compute_s


def test_events_report_entropy_of_unmasked_tokens():
    model = tiny_model()
    for e in run(model, make_policy("none"), gen_len=8, block_len=8, stop_at_eos=False):
        assert len(e.entropies) == len(e.unmasked) == len(e.unmasked_tokens)
        assert e.max_entropy == pytest.approx(max(e.entropies))
        assert all(0 <= h <= math.log(model.config.vocab_size) + 1e-5 for h in e.entropies)
        for pos, tok in zip(e.unmasked, e.unmasked_tokens):
            assert e.tokens[pos - e.prompt_len] == tok


def test_events_report_the_confidence_each_token_was_chosen_with():
    model = tiny_model()
    events = run(model, make_policy("none"), gen_len=8, block_len=8, stop_at_eos=False)
    x = torch.tensor(PROMPT + [model.config.mask_token_id] * 8)
    for e in events:  # the exact decoder: each step's logits are one full forward of the sequence so far
        probs = torch.softmax(model.full_logits(x[None])[0].float(), dim=-1)  # the whole vocabulary, [MASK] too
        assert len(e.confidences) == len(e.unmasked)
        for pos, tok, conf in zip(e.unmasked, e.unmasked_tokens, e.confidences):
            assert conf == pytest.approx(probs[pos, tok].item(), rel=1e-4)
            without_mask = probs[pos].clone()
            without_mask[model.config.mask_token_id] = 0.0
            assert tok == without_mask.argmax()  # temperature 0: the most probable token but the mask
        x[e.unmasked] = torch.tensor(e.unmasked_tokens)


def test_a_decode_at_a_top_p_reports_the_confidences_of_the_nucleus():
    """A nucleus smaller than any token's probability is that token alone: every confidence reads 1.0,
    each token is its row's most probable one but the mask, and the entropy is the model's, uncut."""
    model = tiny_model()
    first = run(model, make_policy("none"), gen_len=8, block_len=8, stop_at_eos=False, top_p=1e-6)[0]
    assert first.confidences == [1.0]
    x = torch.tensor(PROMPT + [model.config.mask_token_id] * 8)
    with torch.no_grad():
        probs = torch.softmax(model.full_logits(x[None])[0].float(), dim=-1)[first.unmasked[0]]
    without_mask = probs.clone()
    without_mask[model.config.mask_token_id] = 0.0
    assert first.unmasked_tokens == [int(without_mask.argmax())]
    assert first.entropies[0] == pytest.approx(float(torch.special.entr(probs).sum()), rel=1e-5)


def test_threshold_unmasks_several_tokens_per_step():
    model = tiny_model()
    one = run(model, make_policy("none"), gen_len=16, block_len=16, stop_at_eos=False)
    parallel = run(model, make_policy("none"), gen_len=16, block_len=16, threshold=0.05, stop_at_eos=False)
    assert len(one) == 16
    assert len(parallel) < 16 and sum(len(e.unmasked) for e in parallel) == 16


@pytest.mark.parametrize(
    ("cfg", "parallel"),
    [
        (dict(), False),
        (dict(steps=16), False),  # as many steps as tokens
        (dict(threshold=1.0), False),  # no confidence is above 1: the most confident token alone
        (dict(block_len=1, threshold=0.05), False),  # a block of one token is one step
        (dict(steps=8), True),
        (dict(threshold=0.05), True),
    ],
)
def test_a_config_is_parallel_exactly_when_some_step_unmasks_several_tokens(cfg, parallel):
    config = DecodeConfig(**{"gen_len": 16, "block_len": 16, "stop_at_eos": False, **cfg})
    events = list(decode(tiny_model(), PROMPT, make_policy("none"), config))
    assert config.parallel == parallel == any(len(e.unmasked) > 1 for e in events)


def test_stops_at_end_of_text_and_fills_the_rest():
    model = tiny_model()
    free = generate(model, PROMPT, make_policy("none"), DecodeConfig(gen_len=16, block_len=4, stop_at_eos=False))
    eos = free.tokens[3]  # pretend the 4th token generated is end-of-text
    model.config.eos_token_ids = (eos,)
    events = run(model, make_policy("none"), gen_len=16, block_len=4)
    last = events[-1]
    assert last.done and last.totals.tokens == last.tokens.index(eos)
    assert last.tokens[last.totals.tokens :] == [eos] * (16 - last.totals.tokens)
    assert last.totals.steps < 16


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(gen_len=20, block_len=8), "not a multiple of block_len"),
        (dict(gen_len=16, block_len=8, steps=1), "steps must be an integer in [2, 16]"),
        (dict(gen_len=16, block_len=8, steps=17), "steps must be an integer in [2, 16]"),
        (dict(gen_len=16, block_len=8, steps=5), "multiple of the number of blocks"),
        (dict(gen_len=0, block_len=8), "gen_len must be"),
        (dict(gen_len=16, block_len=8, threshold=1.5), "threshold must be a number in (0, 1]"),
        (dict(gen_len=16, block_len=8, temperature=float("nan")), "temperature"),
        (dict(gen_len=16, block_len=8, top_p=0.0), "top_p must be a number in (0, 1], got 0.0"),
        (dict(gen_len=16, block_len=8, top_k=0), "top_k must be a positive integer, got 0"),
        (dict(gen_len=16, block_len=8, alg="margin"), "alg must be one of maskgit_plus, topk_margin, entropy, got "
                                                       "'margin'"),
        (dict(gen_len=16, block_len=8, schedule="dreams"), "schedule must be one of block, dream, got 'dreams'"),
        (dict(gen_len=16, block_len=8, threshold=0.9, alg="entropy"), "a threshold reads the candidate's probability"),
        (dict(gen_len=16, block_len=8, threshold=0.9, schedule="dream"), "the dream schedule unmasks as many tokens"),
    ],
)
def test_bad_decode_settings_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError) as e:
        run(tiny_model(), make_policy("none"), **kwargs)
    assert message in str(e.value)


def test_without_a_config_a_decode_takes_the_models_own_lengths():
    """decode(model, prompt, policy) decodes the gen and block length the model declares
    (DecodeConfig.for_model, as the CLI and the app do), not DecodeConfig's own defaults."""
    model = tiny_model(gen_len=16, block_len=4, eos_token_ids=())  # no end-of-text: the whole response
    assert (DecodeConfig().gen_len, DecodeConfig().block_len) != (16, 4)
    events = list(decode(model, PROMPT, make_policy("none")))
    assert len(events) == 16 and len(events[-1].tokens) == 16
    assert [e.block for e in events if e.block_done] == [0, 1, 2, 3]
    assert generate(model, PROMPT, make_policy("none")).tokens == events[-1].tokens


def test_bad_prompts_raise_clear_errors():
    model = tiny_model()
    with pytest.raises(ValueError, match="prompt is empty"):
        list(decode(model, [], make_policy("none"), DecodeConfig(gen_len=8, block_len=8)))
    with pytest.raises(ValueError, match="prompt token ids must be integers"):
        list(decode(model, [1, 2.5], make_policy("none"), DecodeConfig(gen_len=8, block_len=8)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        list(decode(model, [1, 999], make_policy("none"), DecodeConfig(gen_len=8, block_len=8)))
    with pytest.raises(ValueError, match="exceeds the model's 4096 positions"):
        list(decode(model, [1] * 4090, make_policy("none"), DecodeConfig(gen_len=8, block_len=8)))
    with pytest.raises(ValueError, match="prompt is empty"):
        list(
            decode(model, torch.tensor([], dtype=torch.long), make_policy("none"), DecodeConfig(gen_len=8, block_len=8))
        )


@pytest.mark.parametrize("cfg", [dict(), dict(steps=4), dict(threshold=0.5)])
def test_the_mask_token_is_never_decoded(family, cfg):
    """A model that ranks the mask token first everywhere (an untrained one can) still finishes every
    block in its schedule: the mask is never an answer, so no position is 'unmasked' into a mask."""
    model = tiny_model(family)
    with torch.no_grad():
        model.lm_head.weight[model.config.mask_token_id] = model.lm_head.weight.abs().max() * 50
    config = DecodeConfig(gen_len=8, block_len=4, stop_at_eos=False, **cfg)
    events = list(decode(model, [5, 6, 7], make_policy("none"), config))
    assert events[-1].done and model.config.mask_token_id not in events[-1].tokens
    assert len(events) == (cfg.get("steps") or 8) or "threshold" in cfg


class Pausing(CachePolicy):
    """No cache, and each plan takes 0.05 s: of this thread's CPU time (busy) or off the CPU (asleep,
    as a thread is while the OS runs someone else on its core)."""

    name = "pausing"

    def __init__(self, busy: bool) -> None:
        super().__init__()
        self.busy = busy

    def plan(self, ctx):
        (busy_for if self.busy else time.sleep)(0.05)
        return Plan(None, "no cache, after a pause")


def test_a_cpu_step_is_timed_by_its_own_thread_cpu_time_not_by_time_off_the_cpu():
    model = tiny_model()
    asleep, busy = (run(model, Pausing(b), gen_len=8, block_len=8, stop_at_eos=False)[-1].totals for b in (False, True))
    assert asleep.steps == busy.steps == 8
    assert asleep.compute_s < 0.2  # 0.4 s asleep, none of it counted
    assert busy.compute_s >= 0.4 and busy.decision_s >= 0.4  # 0.4 s of work, all of it counted, as the plan's


def test_a_gpu_step_is_timed_by_wall_time_once_the_device_is_done(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    cuda = torch.device("cuda")
    t0 = device_clock(cuda)
    time.sleep(0.05)
    assert device_clock(cuda) - t0 >= 0.05  # off-CPU time counts: the GPU works while this thread waits
    assert synced == [cuda, cuda]


class GcWatcher(CachePolicy):
    """No cache; notes whether automatic garbage collection is on while it plans (inside the step)."""

    name = "gc-watcher"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []

    def plan(self, ctx):
        self.seen.append(gc.isenabled())
        return Plan(None, "no cache")


@pytest.mark.parametrize("enabled", [True, False])
def test_steps_run_with_the_garbage_collector_paused_and_leave_it_as_it_was(enabled):
    watcher = GcWatcher()
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        events = run(tiny_model(), watcher, gen_len=8, block_len=8, stop_at_eos=False)
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert len(events) == 8 and watcher.seen == [False] * 8
