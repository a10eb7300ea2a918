"""A run's inputs checked on their way in (app/controls/run.py): bad values refused with a clear message,
good ones passed on unchanged, each compared policy's own controls."""

from __future__ import annotations

import re

import pytest
from races import PROMPT, controls, race_run

from app.controls.declared import PEER_CONTROLS, compared_policies, raced_policies
from app.controls.run import MAX_PROMPT_CHARS, RawRun, check_run
from app.serving.registry import EMBEDDED_LABEL
from core.policies import POLICIES

BAD = [
    (dict(prompt=""), "prompt: it is empty"),
    (dict(prompt="   \n"), "prompt: it is empty"),
    (dict(prompt="x" * (MAX_PROMPT_CHARS + 1)), f"limit is {MAX_PROMPT_CHARS}"),
    (dict(prompt=None), "prompt: it is empty"),
    (dict(model="/etc/passwd"), "Unknown model"),
    (dict(policy="entropy"), "Unknown policy"),
    (dict(policy="../none"), "Unknown policy"),
    (dict(gen_len=100000), "gen length must be an integer in \\[1, 512\\], got 100000"),
    (dict(gen_len=0), "gen length must be an integer in \\[1, 512\\], got 0"),
    (dict(gen_len=32.5), "gen length must be an integer in \\[1, 512\\], got 32.5"),
    (dict(block_len=5), "do not fit together: gen_len 32 is not a multiple of block_len 5"),
    (dict(block_len=64), "do not fit together: block_len must be"),
    (dict(steps=3), "do not fit together: steps 3 must be a multiple of the number of blocks \\(2\\)"),
    (dict(steps=64), "do not fit together: steps must be .* got 64"),
    (dict(steps=2, threshold=0.9), "Set steps to 0 or the parallel-decoding threshold to 0"),
    (dict(tau=float("nan")), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got NaN"),
    (dict(tau=-1), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got -1"),
    (dict(k=2.5), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got 2.5"),
    (dict(threshold=1.5), "threshold must be a number in \\(0, 1\\], got 1.5"),
    (dict(temperature=float("inf")), "temperature must be a number in \\[0, 2\\], got inf"),
    (dict(seed=-1), "seed must be an integer in \\[0, 2147483647\\], got -1"),
    (dict(seed="7"), "seed must be an integer in \\[0, 2147483647\\], got '7'"),
    (dict(k=True), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got True"),
]


@pytest.mark.parametrize("bad, message", BAD, ids=[str(b)[:40] for b, _ in BAD])
def test_bad_inputs_are_refused_with_a_clear_message(registry, bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        race_run(registry, **bad)


def test_a_run_missing_a_control_or_naming_an_unknown_one_is_refused(registry) -> None:
    numbers = controls()
    del numbers["seed"]
    with pytest.raises(ValueError, match=re.escape("bad controls: missing ['seed'], unknown []")):
        check_run(registry, RawRun(PROMPT, EMBEDDED_LABEL, "vanilla", numbers, {}), raced_policies(), True)
    with pytest.raises(ValueError, match=re.escape("bad controls: missing [], unknown ['dual_x']")):
        sent = dict(prompt=PROMPT, model=EMBEDDED_LABEL, policy="vanilla", **controls(), dual_x=1)
        check_run(registry, RawRun.of(sent), raced_policies(), True)


def test_good_inputs_pass_unchanged_and_build_the_run_once(registry) -> None:
    p = race_run(registry, f"  {PROMPT}  ", policy="dllm-cache", steps=4, temperature=0.5, seed=7, tau=1.25, k=3)
    assert (p.prompt, p.settings["steps"], p.settings["threshold"], p.settings["seed"]) == (PROMPT, 4, 0.0, 7)
    assert (p.settings["k"], p.settings["tau"]) == (3, 1.25)
    assert (p.config.steps, p.config.threshold, p.config.temperature, p.config.seed) == (4, None, 0.5, 7)
    assert [policy.describe() for policy in p.policies] == [
        "dllm-cache(prompt_every=50, response_every=7, rho=0.25)", "entropy(tau=1.25, k=3)"]
    t = race_run(registry, threshold=0.9)
    assert (t.config.steps, t.config.threshold) == (None, 0.9)
    assert compared_policies()[0] == "none" and "entropy" not in compared_policies()


def test_what_a_run_decodes_otherwise_than_it_was_sent_is_said_as_asked_used_and_why(registry) -> None:
    assert race_run(registry, threshold=0.9).changed == ()  # as sent: nothing to say
    padded = race_run(registry, f"  {PROMPT}\n", threshold=1.0)
    assert padded.prompt == PROMPT and padded.config.threshold is None
    assert padded.changed == (
        "Changed: the prompt was sent with 3 blank characters (spaces, new lines) at its ends; the model reads it "
        "without them.",
        "Changed: asked parallel-decoding threshold 1, used parallel-decoding threshold unset (off). These settings "
        "unmask one token a step, and such a decode is run (and named) as one token per step, in blocks.")
    every = race_run(registry, steps=32, schedule="block")  # as many steps as tokens: one token a step
    assert every.changed == (
        "Changed: asked steps 32, used steps unset (one token per step). These settings unmask one token a step, "
        "and such a decode is run (and named) as one token per step, in blocks.",)
    dream = race_run(registry, block_len=1, schedule="dream")
    assert dream.config.schedule == "block" and "asked schedule dream, used schedule block" in dream.changed[0]


def test_the_compared_policy_gets_its_own_controls(registry) -> None:
    """Each compared policy's parameters are controls of their own (from the declarations): the
    chosen policy's values reach it, missing ones take defaults, and a bad value anywhere is refused
    with a message naming the control."""
    for name in compared_policies():
        own = [c for c in PEER_CONTROLS.values() if c.policy == name]
        assert [c.param for c in own] == list(POLICIES[name].parameters)
    p = race_run(registry, policy="dllm-cache", compared={"dllm_cache_rho": 0.5})
    assert p.settings["compared_params"] == {"prompt_every": 50, "response_every": 7, "rho": 0.5}
    assert p.policies[0].describe() == "dllm-cache(prompt_every=50, response_every=7, rho=0.5)"
    none = race_run(registry, policy="vanilla", compared={"dllm_cache_rho": 0.5})
    assert none.settings["compared_params"] == {}
    for compared, message in [({"dllm_cache_rho": 2}, r"rho \(DLLMCache\) must be a number in \[0.05, 1\], got 2"),
                              ({"elastic_gamma": "x"}, r"gamma \(ElasticCache\) must be a number"),
                              ({"elastic_gama": 0.5}, "unknown \\['elastic_gama'\\]")]:
        with pytest.raises(ValueError, match=message):
            race_run(registry, policy="elastic", compared=compared)
