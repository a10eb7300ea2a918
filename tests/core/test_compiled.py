"""The CPU's compiled passes (core/compiled.py), with the few-row kernel's products where it runs
(core/few_rows.py): the eager path's tokens, compiled once ahead, eager and said so when compiling fails."""

import pytest

from core import few_rows
from core.compiled import check_compile, compile_state, compiled_passes, compiles, set_compile
from core.config import DecodeConfig
from core.decoder import generate
from core.loading import chat_prompt_ids, load_model
from core.policies import make_policy
from core.warmup import capture_ahead
from evaluation.tasks import held_out

POLICIES = ["none", "entropy", "dual", "prefix", "dkv-cache"]  # every one whose passes compile (no layer hook)


@pytest.fixture(scope="module")
def embedded():
    model, tokenizer = load_model(None, compile_mode="off")
    item = held_out("words", 1, 4)[0]  # the long few-shot regime the paper measures in
    story = held_out("stories", 1)[0]
    return model, [chat_prompt_ids(tokenizer, item.prompt), chat_prompt_ids(tokenizer, story.prompt)]


def _cases(model, prompts):
    """(prompt, config): a word problem one token per step and with Fast-dLLM's threshold, a story
    sampled as the model's stories are (a shorter one: the sampled path is the same at any length)."""
    words, story = prompts
    return [(words, DecodeConfig.for_model(model.config)),
            (words, DecodeConfig.for_model(model.config, threshold=0.9)),
            (story, DecodeConfig.for_model(model.config, gen_len=64, temperature=0.7, seed=3))]


def _decodes(model, cases):
    return {(policy, i): generate(model, ids, make_policy(policy), config)
            for policy in POLICIES for i, (ids, config) in enumerate(cases)}


def test_compiled_passes_decode_the_eager_tokens_every_policy_once_compiled_ahead(embedded):
    model, prompts = embedded
    cases = _cases(model, prompts)
    eager = _decodes(model, cases)
    set_compile(model, "on")
    try:
        compiled_s = capture_ahead(model, len(prompts[0]) + 256, 32)
        assert compile_state(model) == "compiled"
        if not few_rows.build()[0]:  # where the kernel runs, the passes over few rows are its
            assert few_rows.few_rows_state(model).startswith("few-row kernel")
        assert compiled_s > 0  # a process compiles its graphs once (from inductor's disk cache, if there)
        fast = _decodes(model, cases)
        assert capture_ahead(model, len(prompts[1]) + 64, 32) == 0  # another length: the same graphs
    finally:
        set_compile(model, "off")
    for key in eager:
        assert fast[key].tokens == eager[key].tokens, key
        assert fast[key].totals.capture_s == 0, key  # every graph a decode met was compiled ahead
        assert fast[key].totals.full_steps == eager[key].totals.full_steps, key


def test_a_pass_that_fails_to_compile_runs_eagerly_and_says_why(embedded, monkeypatch):
    model, prompts = embedded
    config = DecodeConfig.for_model(model.config, gen_len=32)
    eager = generate(model, prompts[0], make_policy("entropy"), config)
    set_compile(model, "on")
    try:
        def no_compiler(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore lines")

        monkeypatch.setattr(compiled_passes(model), "compiled", no_compiler)
        again = generate(model, prompts[0], make_policy("entropy"), config)
        assert compile_state(model) == "eager (RuntimeError: InvalidCxxCompiler: No working C++ compiler found)"
        assert again.tokens == eager.tokens
    finally:
        set_compile(model, "off")
    assert compile_state(model) == "eager"


def test_auto_compiles_on_a_cpu_with_a_compiler_only(embedded, monkeypatch):
    model, _ = embedded
    monkeypatch.setattr("core.compiled.cpp_compiler", lambda: "/usr/bin/g++")
    assert compiles("auto", model) and compiles("on", model) and not compiles("off", model)
    monkeypatch.setattr("core.compiled.cpp_compiler", lambda: None)
    assert not compiles("auto", model) and compiles("on", model)
    with pytest.raises(ValueError, match="compile must be one of auto, on, off, got 'fast'"):
        check_compile("fast")
