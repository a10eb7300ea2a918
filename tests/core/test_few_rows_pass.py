"""A pass over few rows in one call (core/few_rows_pass.cpp through core.few_rows.RowsPass): the modules'
logits and cache writes up to float32 rounding, at every row count and head layout it serves (attention
of its own at head sizes 64 and 128, ATen's at others; grouped heads and a q/k/v bias), every row's
logits or a few, the other rows of the cache untouched; bad input refused by name before anything is
written; and only the passes it is meant for."""

import pytest
import torch

from core import few_rows
from core.loading import load_model
from tests.tiny_models import tiny_model

FAILURE = few_rows.build()[0]
pytestmark = pytest.mark.skipif(bool(FAILURE), reason=f"the kernel does not run here: {FAILURE}")
LENGTH = 150


def _models():
    embedded, _ = load_model(None, compile_mode="off")
    return {
        "embedded (head size 64)": embedded,
        "grouped heads of 64, a q/k/v bias": tiny_model("dream", dim=128, n_heads=2, n_kv_heads=1),
        "head size 128": tiny_model(dim=256, n_heads=2, ffn_dim=96),
        "head size 16 (ATen's attention)": tiny_model("dream"),
    }


MODELS = _models()


def _pass(model, tokens, cache, rows, logit_rows=None):
    index = None if rows is None else torch.tensor(rows)
    ids = tokens[None] if rows is None else tokens[index][None]
    with torch.no_grad():
        return model(ids, cache, index, logit_rows)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("count", [1, 5, 16, 18, 33, few_rows.MAX_ROWS])
def test_the_pass_in_one_call_computes_what_the_modules_do(name, count):
    model = MODELS[name]
    generator = torch.Generator().manual_seed(count)
    tokens = torch.randint(0, model.config.vocab_size, (LENGTH,), generator=generator)
    rows = sorted(torch.randperm(LENGTH, generator=generator)[:count].tolist())
    caches = [model.new_cache(1, LENGTH) for _ in range(2)]
    for cache in caches:
        _pass(model, tokens, cache, None)  # the same cache to start from: a full pass of the blocks
    before = [k.clone() for k in caches[0].k]
    changed = tokens.clone()
    changed[rows] = torch.randint(0, model.config.vocab_size, (count,), generator=generator)
    logit_rows = None if count == 1 else torch.tensor(rows[1::3])  # every row's logits, or some rows'
    expected = _pass(model, changed, caches[0], rows, logit_rows)
    few_rows.attach(model)
    try:
        with torch.no_grad():
            assert model.pass_over_rows is not None and model.pass_over_rows.takes(torch.tensor(rows), None)
        got = _pass(model, changed, caches[1], rows, logit_rows)
    finally:
        few_rows.detach(model)
    scale = expected.abs().max()
    assert got.shape == expected.shape and (got - expected).abs().max() <= 1e-4 * scale, name
    others = [i for i in range(LENGTH) if i not in set(rows)]
    for layer, (k_got, k_want, v_got, v_want) in enumerate(zip(caches[1].k, caches[0].k, caches[1].v, caches[0].v)):
        assert torch.equal(k_got[:, :, others], before[layer][:, :, others])  # only the rows' slots are written
        assert (k_got - k_want).abs().max() <= 1e-4 * k_want.abs().max(), (name, layer)
        assert (v_got - v_want).abs().max() <= 1e-4 * v_want.abs().max(), (name, layer)


def test_it_takes_eager_passes_over_at_most_max_rows_without_a_key_mask_or_gradients():
    model = tiny_model()
    few_rows.attach(model)
    try:
        stack = model.pass_over_rows
        rows = torch.arange(few_rows.MAX_ROWS)
        with torch.no_grad():
            assert stack.takes(rows, None)
            assert not stack.takes(None, None)  # a full pass: the blocks (ATen's products for its rows)
            assert not stack.takes(torch.arange(few_rows.MAX_ROWS + 1), None)
            assert not stack.takes(rows, torch.ones(1, LENGTH, dtype=torch.bool))
        assert not stack.takes(rows, None)  # a gradient wanted: the blocks, which have a backward
    finally:
        few_rows.detach(model)
    assert model.pass_over_rows is None


def test_a_gradient_wanted_after_attaching_goes_to_the_blocks():
    model = tiny_model().requires_grad_(False)
    few_rows.attach(model)
    try:
        rows = torch.arange(4)
        assert model.pass_over_rows.takes(rows, None)
        model.requires_grad_(True)  # trained further: the call has no backward
        assert not model.pass_over_rows.takes(rows, None)
    finally:
        few_rows.detach(model)


def test_bad_rows_ids_logit_rows_or_caches_are_refused_by_name_before_anything_is_written():
    model = MODELS["embedded (head size 64)"]
    cache = model.new_cache(1, 20)
    model.reserve_rope(24, torch.device("cpu"))
    ids = torch.tensor([[5, 6]])
    before = [k.clone() for k in cache.k]
    few_rows.attach(model)
    try:
        stack = model.pass_over_rows
        with pytest.raises(RuntimeError, match=r"every row a position of the cache \(0 to 19\)"):
            stack(ids, cache, torch.tensor([3, 20]), None, model._rope)
        vocab = model.config.vocab_size
        with pytest.raises(RuntimeError, match=f"token id {vocab} past its {vocab}"):
            stack(torch.tensor([[5, vocab]]), cache, torch.tensor([3, 4]), None, model._rope)
        with pytest.raises(RuntimeError, match="logit row 5 is not a row of the pass"):
            stack(ids, cache, torch.tensor([3, 4]), torch.tensor([5]), model._rope)
        cache.k[2] = cache.k[2][:, :2]  # two of four heads
        with pytest.raises(RuntimeError, match="a contiguous float32 cache"):
            stack(ids, cache, torch.tensor([3, 4]), None, model._rope)
        assert all(torch.equal(a, b) for a, b in zip(cache.k[:2] + cache.v, before[:2] + before))  # nothing written
    finally:
        few_rows.detach(model)


def test_a_model_not_all_float32_keeps_its_modules():
    model = tiny_model().to(torch.bfloat16)
    few_rows.attach(model)
    try:
        assert model.pass_over_rows is None
    finally:
        few_rows.detach(model)
