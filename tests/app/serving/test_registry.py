"""The model registry (app/serving/registry.py): a list fixed on the server, decode defaults from each
checkpoint, models loaded once and evicted oldest first, prompts checked by the tokenizer alone, and
the examples of every task a model reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from races import PROMPT

import app.serving.registry
from app.serving.examples import Example
from app.serving.registry import EMBEDDED_LABEL, ModelChoice, ModelRegistry, build_registry, extra_dirs_from_env
from core.config import DEFAULT_BLOCK_LEN, DEFAULT_GEN_LEN
from core.loading import EMBEDDED, read_config

MODEL = os.environ.get("ENTROPYCACHE_MODEL")  # None: the shipped embedded model


@pytest.mark.skipif(MODEL is not None, reason="the words are unknown to the embedded model's vocabulary")
def test_the_prompt_check_of_a_model_not_loaded_yet_reads_only_its_tokenizer() -> None:
    fresh = build_registry(cuda=False)
    embedded = fresh.choice(EMBEDDED_LABEL)
    fresh.check_prompt(embedded, PROMPT)
    with pytest.raises(ValueError, match="^The model does not know 1 word of the prompt: 'hello'.*trained only on"):
        fresh.check_prompt(embedded, "hello")
    assert not fresh.is_loaded(EMBEDDED_LABEL)
    gpu = build_registry(cuda=True)
    for label in gpu.labels[1:]:  # hub models, not downloaded: their byte-level tokenizers read anything
        gpu.check_prompt(gpu.choice(label), "<|mask|> hello")
        assert not gpu.is_loaded(label)


def test_model_list_is_fixed_on_the_server(monkeypatch, tmp_path) -> None:
    folder = MODEL or str(build_registry(cuda=False).choice(EMBEDDED_LABEL).source)
    cpu = build_registry(embedded=folder, cuda=False)
    assert cpu.labels == [EMBEDDED_LABEL]
    gpu = build_registry(embedded=folder, cuda=True)
    assert any("LLaDA-8B-Instruct" in label for label in gpu.labels)
    assert any("Dream-7B-Instruct" in label for label in gpu.labels)
    assert {gpu.choice(label).source for label in gpu.labels[1:]} == {"llada", "dream"}
    monkeypatch.setenv("ENTROPYCACHE_MODELS", os.pathsep.join([folder, folder]))
    extra = build_registry(extra_dirs_from_env(), embedded=folder, cuda=False)
    assert len(extra.labels) == 2 and extra.labels[1].endswith("(local, CPU)")
    for label in ("/etc/passwd", folder, "llada"):
        with pytest.raises(ValueError, match="Unknown model"):
            cpu.choice(label)
    with pytest.raises(ValueError, match="no config.json"):
        build_registry([str(tmp_path)], embedded=folder, cuda=False)


def test_decode_defaults_come_from_the_checkpoint_config_or_cores_defaults() -> None:
    folder = MODEL or str(EMBEDDED)
    config, _, _ = read_config(Path(folder))
    reg = build_registry(embedded=folder, cuda=True)
    first = reg.choice(EMBEDDED_LABEL)
    assert (first.gen_len, first.block_len) == (config.gen_len, config.block_len)
    for label in reg.labels[1:]:
        assert (reg.choice(label).gen_len, reg.choice(label).block_len) == (DEFAULT_GEN_LEN, DEFAULT_BLOCK_LEN)


def test_models_are_loaded_once(registry) -> None:
    assert registry.get(EMBEDDED_LABEL) is registry.get(EMBEDDED_LABEL)
    examples = registry.choice(EMBEDDED_LABEL).examples
    assert len(examples) >= 3 and all("how many" in e or e.startswith("tell a story") for e in examples)


def test_gpu_models_are_evicted_oldest_first_beyond_the_limit(monkeypatch) -> None:
    loads: list[str] = []

    def fake_load(source: str, device: str, fusion: str, compile_mode: str):
        loads.append(source)
        return object(), source

    monkeypatch.setattr(app.serving.registry, "load_model", fake_load)
    choices = [ModelChoice(f"m{i}", f"src{i}", "cuda", 8, 8, (Example("x", "x", {}),)) for i in range(3)]
    one = ModelRegistry(choices)
    first = one.get("m0")
    assert one.get("m0") is first and loads == ["src0"]
    one.get("m1")
    assert not one.is_loaded("m0") and one.is_loaded("m1")
    two = ModelRegistry(choices, max_gpu_models=2)
    for label in ("m0", "m1", "m2"):
        two.get(label)
    assert [two.is_loaded(f"m{i}") for i in range(3)] == [False, True, True]


def test_a_model_of_every_task_gets_an_example_of_each(tmp_path) -> None:
    """Examples are the held-out items of every task the model's tokenizer reads: a model trained on
    the whole mixture (the embedded one) gets plain and few-shot problems and stories; one whose
    vocabulary has only the word problems' words gets no story."""
    from tiny_models import save_word_problems_model

    from app.serving.registry import local_choice

    embedded = local_choice(EMBEDDED, "embedded", "cpu")
    shots = [e.count("question :") for e in embedded.examples]
    assert sorted(n for n in shots if n) == [3, 5]  # after 2 and after 4 worked examples
    assert sum(e.startswith("tell a story about") for e in embedded.examples) == 2
    assert embedded.examples[0].startswith("tell a story about")  # the prompt the Drift tab opens on
    assert shots[embedded.paper_example] == 5  # the paper's comparison races the 4-shot problem
    assert [e.long for e in embedded.example_list].count(True) == 1
    assert "alone or after worked examples" in embedded.trained_on and "short stories" in embedded.trained_on
    sums = local_choice(save_word_problems_model(tmp_path), "sums", "cpu")
    assert len(sums.examples) == 6 and not any(e.startswith("tell a story") for e in sums.examples)
    assert "stories" not in sums.trained_on
