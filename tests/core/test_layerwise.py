"""Layer-wise plans: the stream forward, the signals a hook reads, and dLLM-Cache's per-layer choice."""

import torch
from tiny_models import tiny_model

from core.layerwise import LayerHook, LayerView
from core.policies.dllm_cache import ValueDriftRows


class Fixed(LayerHook):
    """A stream hook computing the same given rows at every layer but the first (None: all)."""

    stream = True

    def __init__(self, rows):
        self.fixed = rows

    def rows(self, layer, view):
        return None if layer == 0 else self.fixed


class Probe(LayerHook):
    """Records the attention probabilities of some query rows at every layer."""

    def __init__(self, queries):
        self.queries, self.seen = queries, []

    def after(self, layer, view):
        self.seen.append(view.attention(self.queries))


def test_a_stream_forward_that_skips_rows_reuses_their_cached_outputs(family):
    """With the tokens unchanged, skipping every row after layer 0 reproduces the full forward exactly
    (each skipped row adds the outputs it had); once a token changes, the skipped rows are stale."""
    model = tiny_model(family)
    ids = torch.tensor([[5, 6, 7, 8, 9, 47, 47, 47]])
    cache = model.new_cache(1, ids.shape[1])
    with torch.no_grad():
        full = model(ids, cache, hook=Fixed(None))
        assert torch.equal(full, model.full_logits(ids))
        hook = Fixed(torch.empty(0, dtype=torch.long))
        assert torch.equal(model(ids, cache, hook=hook), full)
        assert hook.layer_rows == [8] + [0] * (model.config.n_layers - 1)
        changed = ids.clone()
        changed[0, 5] = 11
        stale = model(changed, cache, hook=hook)
    assert not torch.equal(stale, model.full_logits(changed))


def test_attention_probabilities_are_the_ones_the_layer_used(family):
    """probs @ V through the output projection gives the layer's own attention output for those rows."""
    model = tiny_model(family)
    ids = torch.tensor([[5, 6, 7, 8, 9, 47, 47]])
    queries = torch.tensor([1, 4])
    cache = model.new_cache(1, ids.shape[1])
    probe = Probe(queries)
    with torch.no_grad():
        model(ids, cache, hook=probe)
        block, cfg = model.layers[0], model.config
        x = model.embed(ids)
        cos, sin = model._rope_at(torch.arange(ids.shape[1]), ids.shape[1])
        expected = block.attn(block.attn_norm(x), cos[:, None], sin[:, None], cache, 0, None, None)[:, queries]
        probs = probe.seen[0]
        v = cache.v[0].repeat_interleave(cfg.n_heads // cfg.n_kv_heads, dim=1)
        y = (probs @ v.float()).transpose(1, 2).reshape(1, len(queries), -1)
        got = block.attn.wo(y.to(x.dtype))
    assert len(probe.seen) == cfg.n_layers and probs.shape == (1, cfg.n_heads, 2, ids.shape[1])
    assert torch.allclose(probs.sum(-1), torch.ones(1, cfg.n_heads, 2))
    assert torch.allclose(got, expected, atol=1e-5)


class ValuesView:
    """A layer view whose V are chosen by hand: `fresh` ([rows, head_dim]) for the response rows after a
    `prompt_len`-row prompt, and the same cached V, `cached`, for every one of them. It records the V stored."""

    def __init__(self, prompt_len, fresh, cached):
        self.prompt_len = prompt_len
        self.fresh = fresh[None, None]  # [batch 1, kv_heads 1, rows, head_dim]
        self.cached = cached.expand_as(self.fresh)
        self.x = torch.zeros(1, prompt_len + fresh.shape[0], fresh.shape[1])
        self.stored = None

    def fresh_values(self, rows):
        assert rows.tolist() == list(range(self.prompt_len, self.x.shape[1]))  # the response rows, all of them
        return self.fresh

    def cached_values(self, rows):
        return self.cached

    def store_values(self, rows, v):
        self.stored = (rows.tolist(), v)


def test_dllm_cache_recomputes_the_rows_whose_value_moved_most():
    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    view = ValuesView(4, torch.stack([e1, e2, e1 + e2, -e1]), e1)  # cosine to e1: 1, 0, 0.707, -1 (rows 4..7)
    hook = ValueDriftRows(prompt_len=4, length=8, refresh_prompt=False, refresh_response=False, rho=0.5)
    assert hook.rows(1, view).tolist() == [5, 7]  # the two lowest cosines: 0 (row 5) and -1 (row 7)
    assert view.stored[0] == [4, 5, 6, 7] and view.stored[1] is view.fresh  # every response V overwritten
    hook.rho = 0.75
    assert hook.rows(1, view).tolist() == [5, 6, 7]
    assert hook.rows(0, view) is None  # layer 0 always computes every row
    prompt = ValueDriftRows(prompt_len=4, length=8, refresh_prompt=True, refresh_response=False, rho=0.25)
    assert prompt.rows(1, view).tolist() == [0, 1, 2, 3, 7]
    response = ValueDriftRows(prompt_len=4, length=8, refresh_prompt=False, refresh_response=True, rho=0.25)
    assert response.rows(1, view).tolist() == [4, 5, 6, 7]


def test_dllm_cache_share_is_the_exact_fraction_of_rows():
    """100 x 0.29 is 28.999999999999996 in floating point: the share is still 29 rows, the most turned."""
    hook = ValueDriftRows(prompt_len=4, length=104, refresh_prompt=False, refresh_response=False, rho=0.29)
    angles = torch.linspace(0, 3, 100)  # row i's fresh V turned by an angle that grows with i
    view = ValuesView(4, torch.stack([angles.cos(), angles.sin()], dim=-1), torch.tensor([1.0, 0.0]))
    assert hook.rows(1, view).tolist() == list(range(104 - 29, 104))


def test_views_index_the_rows_they_hold():
    """In a rows forward the view's x holds only the computed rows; it finds them by position."""
    view = LayerView(None, None, 0, torch.arange(3.0)[None, :, None], torch.tensor([2, 5, 9]), None, None)
    assert view._index(torch.tensor([5, 9])).tolist() == [1, 2]
