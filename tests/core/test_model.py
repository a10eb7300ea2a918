"""The transformer: partial passes against the cache, and parity with transformers' own models."""

import pytest
import torch
from checkpoints import tiny_llama, tiny_qwen2, write_dream, write_llada
from tiny_models import tiny_model

from core.loading import load_model


def _after_a_full_pass(family: str, length: int):
    """A tiny model, random ids of `length`, and a cache a full forward over them has filled, with
    that forward's logits: where every partial pass below starts."""
    model = tiny_model(family)
    ids = torch.randint(0, 40, (1, length))
    cache = model.new_cache(1, length)
    return model, ids, cache, model(ids, cache)


def test_partial_forward_matches_full_on_its_rows(family):
    model, ids, cache, full = _after_a_full_pass(family, 24)
    rows = torch.tensor([0, 5, 6, 7, 20, 23])
    partial = model(ids[:, rows], cache, rows)
    torch.testing.assert_close(partial, full[:, rows], rtol=1e-5, atol=1e-5)


def test_partial_forward_uses_reused_rows_from_the_cache(family):
    """Rows not recomputed keep their old K/V: changing a token outside `rows` changes nothing."""
    model, ids, cache, _ = _after_a_full_pass(family, 16)
    rows = torch.tensor([2, 3])
    before = model(ids[:, rows], cache, rows)
    changed = ids.clone()
    changed[0, 10] = (ids[0, 10] + 1) % 40
    after = model(changed[:, rows], cache, rows)  # row 10 not recomputed: its stale K/V is used
    torch.testing.assert_close(after, before)
    fresh = model(changed, model.new_cache(1, 16))[:, rows]
    assert (fresh - after).abs().max() > 1e-4  # while a full forward does see the change


def test_partial_forward_writes_fresh_kv_for_its_rows(family):
    """After tokens change at rows S, a partial pass over S leaves the cache at S equal to a full
    forward on the new tokens at the first layer (whose inputs depend only on the token itself)."""
    model, ids, cache, _ = _after_a_full_pass(family, 16)
    rows = torch.tensor([3, 9, 10])
    new = ids.clone()
    new[0, rows] = (ids[0, rows] + 5) % 40
    model(new[:, rows], cache, rows)
    fresh = model.new_cache(1, 16)
    model(new, fresh)
    torch.testing.assert_close(cache.k[0][:, :, rows], fresh.k[0][:, :, rows])
    torch.testing.assert_close(cache.v[0][:, :, rows], fresh.v[0][:, :, rows])
    assert (cache.k[0][:, :, rows] - model.new_cache(1, 16).k[0][:, :, rows]).abs().max() > 0


def test_logit_rows_select_a_subset(family):
    model, ids, cache, full = _after_a_full_pass(family, 12)
    rows = torch.tensor([1, 4, 8, 9])
    some = model(ids[:, rows], cache, rows, logit_rows=torch.tensor([4, 9]))
    torch.testing.assert_close(some, full[:, [4, 9]], rtol=1e-5, atol=1e-5)


def test_cache_is_preallocated_and_written_in_place():
    model = tiny_model()
    cache = model.new_cache(1, 10)
    pointers = [t.data_ptr() for t in cache.k + cache.v]
    model(torch.randint(0, 40, (1, 10)), cache)
    model(torch.randint(0, 40, (1, 2)), cache, torch.tensor([3, 4]))
    assert [t.data_ptr() for t in cache.k + cache.v] == pointers
    assert all(t.abs().sum() > 0 for t in cache.k)


def test_key_mask_makes_left_padding_invisible():
    """Training batches are left-padded: masked keys must not change the real rows' logits."""
    model = tiny_model()
    ids = torch.randint(0, 40, (1, 10))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    key_mask = torch.tensor([[False] * 3 + [True] * 10])
    torch.testing.assert_close(model.full_logits(padded, key_mask)[:, 3:], model.full_logits(ids), rtol=1e-4, atol=1e-4)


def _ours_and_reference(tmp_path, hf, write, shape: tuple[int, int], **load):
    """Our model loaded from `hf` written in its real layout by `write`, random ids of `shape`, and
    transformers' bidirectional logits on them: the reference ours must match."""
    ours, _ = load_model(write(tmp_path, hf), **load)
    ids = torch.randint(0, 60, shape)
    with torch.no_grad():
        return ours, ids, hf(ids, is_causal=False).logits


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_parity_with_transformers_llama_bidirectional(tmp_path, kv_heads):
    hf = tiny_llama(seed=1, kv_heads=kv_heads)
    ours, ids, ref = _ours_and_reference(tmp_path, hf, write_llada, (2, 33))
    with torch.no_grad():
        causal = hf(ids).logits
        got = ours.full_logits(ids)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert (got - causal).abs().max() > 1e-3  # the reference really is bidirectional


def test_parity_with_transformers_qwen2_bidirectional(tmp_path):
    ours, ids, ref = _ours_and_reference(tmp_path, tiny_qwen2(seed=2), write_dream, (1, 40))
    with torch.no_grad():
        torch.testing.assert_close(ours.full_logits(ids), ref, rtol=1e-4, atol=1e-4)


def test_bfloat16_parity_within_tolerance(tmp_path):
    ours, ids, ref = _ours_and_reference(tmp_path, tiny_llama(seed=3), write_llada, (1, 20), dtype=torch.bfloat16)
    got = ours.full_logits(ids)
    assert got.dtype == torch.float32  # logits are returned in float32 for sampling
    assert (got - ref).abs().max() < 0.1 * ref.abs().max()
