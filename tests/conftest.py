import os
import pickle
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/checkpoints.py

from core.config import ModelConfig  # noqa: E402
from core.model import DiffusionTransformer  # noqa: E402


def tiny_config(family: str = "llada", **overrides) -> ModelConfig:
    """LLaDA-style (no shift, no bias, full heads) or Dream-style (shift, q/k/v bias, grouped heads)."""
    base = dict(vocab_size=48, dim=64, n_layers=2, n_heads=4, ffn_dim=128, mask_token_id=47, eos_token_ids=(1,))
    if family == "dream":
        base.update(n_kv_heads=2, qkv_bias=True, logit_shift=1, family="dream")
    else:
        base.update(family="llada")
    base.update(overrides)
    return ModelConfig(**base)


def busy_for(seconds: float) -> None:
    """Work on this thread's CPU for `seconds` of its CPU time (time the step clock counts, unlike a sleep)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def tiny_model(family: str = "llada", seed: int = 0, **overrides) -> DiffusionTransformer:
    torch.manual_seed(seed)
    model = DiffusionTransformer(tiny_config(family, **overrides)).eval()
    with torch.no_grad():  # sharpen the output so that some steps are confident (entropy below tau)
        model.lm_head.weight.mul_(8)
    return model


def word_problems_tokenizer():
    """A word-level tokenizer of the word problems' words alone: a model that never saw a story."""
    from evaluation.tasks import word_problems
    from training.word_tokenizer import build_tokenizer

    return build_tokenizer(word_problems.VOCABULARY)


def save_word_problems_model(folder: Path, **overrides) -> Path:
    """A tiny untrained own model with word_problems_tokenizer(), saved in the embedded model's layout;
    `overrides` are ModelConfig fields (e.g. its decode defaults gen_len and block_len)."""
    from training.checkpoint import save_own_model

    tok = word_problems_tokenizer()
    save_own_model(tiny_model(vocab_size=len(tok), mask_token_id=tok.mask_token_id, **overrides), tok, folder)
    return folder


@pytest.fixture(params=["llada", "dream"])
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def registry():
    """The app's model registry on the embedded model (or ENTROPYCACHE_MODEL), preloaded."""
    from app.serving.registry import build_registry

    reg = build_registry(embedded=os.environ.get("ENTROPYCACHE_MODEL"), cuda=False)
    reg.preload()
    return reg


class StubRegistry:
    """One CPU model 'm', always loaded, that is nothing: for tests of the serving machinery alone."""

    labels = ["m"]

    def choice(self, label):
        from types import SimpleNamespace

        return SimpleNamespace(label=label, device="cpu")

    def is_loaded(self, label):
        return True

    def get(self, label):
        return object(), object()


@pytest.fixture
def gpu_registry(registry, monkeypatch):
    """A registry with one 'gpu' model (cuda device) that is really the embedded model on the CPU."""
    import app.serving.registry
    from app.serving.registry import EMBEDDED_LABEL, ModelChoice, ModelRegistry

    monkeypatch.setattr(app.serving.registry, "load_model", lambda source, device, fusion: registry.get(EMBEDDED_LABEL))
    examples = registry.choice(EMBEDDED_LABEL).example_list  # the warm-up reads the long one: the model must read it
    return ModelRegistry([ModelChoice("gpu", "x", "cuda", 32, 16, examples)])


def fake_zero_gpu(runner) -> list[tuple]:
    """Route a tab runner's gpu_snapshots (app/serving/runner.py) through a pickle round trip of its arguments,
    as spaces.GPU hands them to its forked worker; returns the list of argument tuples the 'worker' received."""
    sent = []

    def gpu_snapshots(*args):
        sent.append(pickle.loads(pickle.dumps(args)))
        return runner.snapshots(*sent[-1])

    runner.gpu_snapshots = gpu_snapshots
    return sent

