"""The few-row product kernel (core/few_rows.py): the product within float32's error bound at every row
count, the same bits from bfloat16 and float32 panels, ATen's own product past MAX_ROWS, attached only
with compiled passes, and ATen's products, said why, where it cannot run."""

import os
import time

import pytest
import torch
import torch.nn.functional as F

from core import few_rows
from core.compiled import set_compile
from core.loading import load_model

FAILURE = few_rows.build()[0]
needs_kernel = pytest.mark.skipif(bool(FAILURE), reason=f"the kernel does not run here: {FAILURE}")
ROW_COUNTS = [0, 1, 2, 11, 12, 13, 18, 25, 35, few_rows.MAX_ROWS]


@pytest.fixture(scope="module")
def model():
    model, _ = load_model(None, compile_mode="off")
    return model


def _bf16_exact(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).bfloat16().float()


def _kernel(x, weight, bias=None, panels=None):
    panels = few_rows.pack(weight) if panels is None else panels
    return torch.ops.entropycache.few_rows_linear(x, weight, bias, panels, few_rows.MAX_ROWS)


def _within_float32_bound(y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias=None) -> bool:
    """|y - x W^T| within the bound on a float32 multiply-add chain of k terms (and one bias add):
    (k + 1) u sum |x_i w_i| (Higham, 3.1; u = 2^-24), against the product in float64."""
    exact = x.double() @ weight.double().T + (0 if bias is None else bias.double())
    scale = x.double().abs() @ weight.double().abs().T + (0 if bias is None else bias.double().abs())
    bound = (weight.shape[1] + 1) * 2.0**-24 * scale * 1.01 + 1e-30
    return bool(((y.double() - exact).abs() <= bound).all())


@needs_kernel
@pytest.mark.parametrize("n, k", [(768, 256), (256, 768), (210, 256), (33, 40), (1, 7)])
def test_the_product_of_every_row_count_is_within_float32_s_bound(n, k):
    weight = _bf16_exact(n, k, seed=n + k)
    panels = few_rows.pack(weight)
    for m in ROW_COUNTS:
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
        y = _kernel(x, weight, panels=panels)
        assert y.shape == (m, n) and y.dtype == torch.float32
        assert _within_float32_bound(y, x, weight), (n, k, m)


@needs_kernel
def test_bfloat16_and_float32_panels_give_the_same_bits():
    weight = _bf16_exact(100, 64, seed=1)
    assert few_rows.pack(weight).dtype == torch.bfloat16
    as_float32 = torch.ops.entropycache.pack_panels(weight, False)
    width = 32 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 16  # two vectors of float32
    assert as_float32.dtype == torch.float32 and as_float32.shape == (-(-100 // width), 64, width)
    for m in (1, 13, 40):
        x = torch.randn(3, m, 64)  # a batch dimension, as a pass has
        assert torch.equal(_kernel(x, weight), _kernel(x, weight, panels=as_float32))


@needs_kernel
def test_a_weight_that_is_not_bfloat16_keeps_float32_panels_and_a_bias_is_added():
    weight = _bf16_exact(48, 32, seed=2)
    weight[0, 0] += 2.0**-20  # below bfloat16's precision at this magnitude
    bias = torch.randn(48)
    panels = few_rows.pack(weight)
    assert panels.dtype == torch.float32
    x = torch.randn(18, 32)
    assert _within_float32_bound(_kernel(x, weight, bias, panels), x, weight, bias)


@needs_kernel
def test_past_max_rows_the_product_is_aten_s():
    weight, bias = _bf16_exact(64, 32, seed=3), torch.randn(64)
    x = torch.randn(few_rows.MAX_ROWS + 1, 32)
    assert torch.equal(_kernel(x, weight, bias), F.linear(x, weight, bias))


@needs_kernel
def test_compiled_passes_attach_the_kernel_and_eager_ones_detach_it(model):
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    set_compile(model, "on")
    try:
        said = f"few-row kernel up to {few_rows.MAX_ROWS} rows (the pass in one call), bfloat16 panels (built or"
        assert few_rows.few_rows_state(model).startswith(said)
        assert all(getattr(m, few_rows.PANELS).dtype == torch.bfloat16 for m in linears)
        x = torch.randn(1, 18, model.config.dim)
        head = model.lm_head
        with torch.no_grad():
            assert _within_float32_bound(head(x)[0], x[0], head.weight)
        trained = head(x)  # a gradient wanted: ATen's product, which has a backward
        trained.sum().backward()
        assert torch.equal(trained, F.linear(x, head.weight)) and head.weight.grad is not None
        head.weight.grad = None
    finally:
        set_compile(model, "off")
    assert few_rows.few_rows_state(model) == "ATen"
    assert not any(few_rows.PANELS in m._buffers or "forward" in vars(m) for m in linears)
    assert model.pass_over_rows is None


def test_a_cpu_without_avx2_is_said_and_builds_nothing(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert few_rows.build.__wrapped__() == ("this CPU has neither AVX-512 nor AVX2 (DEFAULT)", 0.0)


def test_where_the_kernel_cannot_run_products_stay_aten_s_and_say_why(model, monkeypatch):
    monkeypatch.setattr(few_rows, "build", lambda: ("this CPU has neither AVX-512 nor AVX2 (DEFAULT)", 0.0))
    set_compile(model, "on")
    try:
        assert few_rows.few_rows_state(model) == "ATen (this CPU has neither AVX-512 nor AVX2 (DEFAULT))"
        assert not any("forward" in vars(m) for m in model.modules())
    finally:
        set_compile(model, "off")
    assert few_rows.few_rows_state(model) == "ATen"


def test_a_killed_build_s_lock_is_dropped_and_a_live_one_kept(tmp_path):
    stale, live = tmp_path / "stale", tmp_path / "live"
    stale.touch()
    live.touch()
    old = time.time() - few_rows.STALE_LOCK_S - 1
    os.utime(stale, (old, old))
    few_rows._drop_stale_lock(stale)
    few_rows._drop_stale_lock(live)
    few_rows._drop_stale_lock(tmp_path / "none")  # no lock: nothing to do
    assert not stale.exists() and live.exists()
