"""Passes over few rows on the CPU: core/few_rows.cpp's matrix product and core/few_rows_pass.cpp's
pass in one call, built once per machine, with each model's weights laid out for them once.

A partial pass multiplies ~18 rows by every weight matrix. ATen's product (MKL) packs the weight again
at every call, a cost that does not shrink with the rows, so those products ran at a third to a half
of the rate of a full pass's and were most of a partial pass's time (docs/BENCHMARKS.md, "The
floor"). The kernel multiplies weights laid out once in panels: bfloat16 where every weight of a
matrix is exactly one (a bf16 checkpoint loaded in float32, as the embedded model and LLaDA are: the
same values from half the bytes), float32 otherwise. Its sums are float32 multiply-add chains over
k, so it computes what F.linear does up to float rounding.

Around the products, a pass over few rows spent as long again between its kernels, compiled or not:
operator calls, shape checks, buffers, and dynamo's checks of every weight, on one thread while the
other waited. So a partial pass of at most MAX_ROWS rows runs in one call, ids to logits (`RowsPass`,
which DiffusionTransformer.forward calls in place of its embedding, blocks and head): each layer's
pointwise parts as loops, its products the kernel's, its attention a kernel of its own for head sizes
64 and 128 (ATen's otherwise). It computes what the modules do up to float rounding (tests/core/
test_few_rows_pass.py), so its tokens are the eager path's on the embedded model (tests/core/
test_compiled.py), not promised bit for bit.

Where it applies: a model whose passes compile on the CPU (core.compiled.set_compile attaches it and
detaches it; eager passes stay the blocks' with ATen's products, the reference). Its Linears' forward
is the kernel's too, for the passes that one call does not take: a layer hook's, and a compiled
one (a product over more than MAX_ROWS rows is ATen's inside the same operator, so one compiled graph
serves every row count; so is one that needs a gradient).
What it costs: a build of ~15 s the first time on a machine (torch's extension cache keeps it for the
next process; it needs the C++ compiler that compiling passes needs, and ninja), and the panels'
memory: half the float32 weights' in bfloat16, as much again in float32. It is built for the CPU's
vector width, AVX-512 or AVX2 (few_rows.h); where the CPU has neither or the build fails, passes stay
the blocks' with ATen's products and `few_rows_state` says why.
"""

from __future__ import annotations

import functools
import time
import weakref
from pathlib import Path
from types import MethodType

import torch
from torch import nn

from core.errors import error_line
from core.kv_cache import KVCache
from core.model import DiffusionTransformer

SOURCES = [Path(__file__).with_name(name) for name in ("few_rows.cpp", "few_rows_pass.cpp")]
# The compiler's flags per vector width the kernels are written for (few_rows.h), with ATen's vector
# types at the same width for the layer's loops, as inductor compiles its own kernels.
CFLAGS = {
    "AVX512": ["-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
    "AVX2": ["-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma", "-mf16c"],
}
NAME = "entropycache_few_rows"  # the extension's, and its folder's in torch's extension cache (one per width)
STALE_LOCK_S = 600.0  # a build takes ~10 s: a lock this old is a killed build's
# Rows past which ATen's product is as fast as the kernel's (24 products of the embedded model in
# sequence, 2 threads: 4.1 against 5.8 ms at 96 rows, 6.7 against 5.5 ms at 128).
MAX_ROWS = 96
PANELS = "few_rows_panels"  # the buffer each Linear holds its panels in
_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> how its passes over few rows run


@functools.cache
def build() -> tuple[str, float]:
    """Why the kernel cannot run here ('' when it is built and loaded), and the seconds building or
    loading it took: it needs AVX-512 or AVX2, and a build once per machine and source (torch's extension
    cache keeps it for later processes, which only load it)."""
    width = torch.backends.cpu.get_cpu_capability()
    if width not in CFLAGS:
        return f"this CPU has neither AVX-512 nor AVX2 ({width})", 0.0
    started = time.perf_counter()
    try:
        from torch.utils.cpp_extension import get_default_build_root, load

        name = f"{NAME}_{width.lower()}"
        folder = Path(get_default_build_root()) / name
        folder.mkdir(parents=True, exist_ok=True)
        _drop_stale_lock(folder / "lock")
        load(name, [str(path) for path in SOURCES], extra_cflags=["-O3", "-fopenmp", *CFLAGS[width]],
             extra_ldflags=["-fopenmp"], build_directory=str(folder), is_python_module=False)
    except Exception as e:  # noqa: BLE001 -- no compiler, no ninja, a failed build: ATen's products work
        return f"not built: {error_line(e)}", time.perf_counter() - started

    @torch.library.register_fake("entropycache::few_rows_linear")
    def _(x, weight, bias, panels, max_rows):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    return "", time.perf_counter() - started


def _drop_stale_lock(lock: Path) -> None:
    """torch's builder waits for as long as a build's lock file exists, and a build killed half-way leaves
    one behind: a lock older than any build takes is dropped."""
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
    except FileNotFoundError:
        pass


def pack(weight: torch.Tensor) -> torch.Tensor:
    """The weight's panels: bfloat16 when every weight is exactly a bfloat16, else float32."""
    exact = torch.equal(weight.to(torch.bfloat16).float(), weight)
    return torch.ops.entropycache.pack_panels(weight, exact)


def few_rows_linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The Linear's forward through the kernel (ATen's past MAX_ROWS rows, and wherever a gradient is
    wanted: the kernel has no backward, and a decode runs without gradients)."""
    if torch.is_grad_enabled() and (x.requires_grad or module.weight.requires_grad):
        return nn.functional.linear(x, module.weight, module.bias)
    return torch.ops.entropycache.few_rows_linear(x, module.weight, module.bias, getattr(module, PANELS), MAX_ROWS)


class RowsPass:
    """A model's pass over a few rows as one call of the extension's few_rows_pass
    (core/few_rows_pass.cpp): from the rows' ids to the logits, the whole stack in C++, its weights'
    lists built once."""

    def __init__(self, model: DiffusionTransformer) -> None:
        blocks, cfg = model.layers, model.config
        self.embed = model.embed.weight
        self.weights = (
            [b.attn_norm.weight for b in blocks],
            [getattr(b.attn.wqkv, PANELS) for b in blocks],
            [b.attn.wqkv.bias for b in blocks] if cfg.qkv_bias else [],
            [getattr(b.attn.wo, PANELS) for b in blocks],
            [b.ffn_norm.weight for b in blocks],
            [getattr(b.ffn.w13, PANELS) for b in blocks],
            [getattr(b.ffn.w2, PANELS) for b in blocks],
            model.norm.weight,
            getattr(model.lm_head, PANELS),
        )
        self.shape = (cfg.vocab_size, cfg.n_heads, cfg.n_kv_heads, cfg.norm_eps)
        self.parameters = list(model.parameters())

    def takes(self, rows: torch.Tensor | None, key_mask: torch.Tensor | None) -> bool:
        """Whether a pass over `rows` runs here: an eager pass over at most MAX_ROWS rows, without a key
        mask, and without gradients (the call has no backward)."""
        if torch.compiler.is_compiling() or rows is None or key_mask is not None:
            return False
        wanted = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters)  # read now: may change
        return rows.numel() <= MAX_ROWS and not wanted

    def __call__(self, ids: torch.Tensor, cache: KVCache, rows: torch.Tensor, logit_rows: torch.Tensor | None,
                 rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.ops.entropycache.few_rows_pass(ids, rows, logit_rows, self.embed, *rope, cache.k, cache.v,
                                                    *self.weights, *self.shape)


def attach(model: DiffusionTransformer) -> None:
    """Route the model's float32 CPU Linears through the kernel, each with its panels packed now from
    its current weights (a model trained further must attach again); a no-op, with its reason kept for
    few_rows_state, where the kernel cannot run."""
    linears = _linears(model)
    failure, seconds = build()
    failure = failure or ("" if linears else "no float32 weights on the CPU")
    if failure:
        detach(model)
        _STATE[model] = f"ATen ({failure})"
        return
    with torch.no_grad():
        for module in linears:
            module.register_buffer(PANELS, pack(module.weight.detach()), persistent=False)
            module.forward = MethodType(few_rows_linear, module)
    model.pass_over_rows = RowsPass(model) if _stack_runs(model) else None
    dtypes = {getattr(module, PANELS).dtype for module in linears}
    layout = " and ".join("bfloat16" if d == torch.bfloat16 else "float32" for d in sorted(dtypes, key=str))
    stack = "the pass in one call" if model.pass_over_rows is not None else "products only"
    _STATE[model] = (f"few-row kernel up to {MAX_ROWS} rows ({stack}), {layout} panels "
                     f"(built or loaded in {seconds:.1f} s)")


def detach(model: DiffusionTransformer) -> None:
    """Every Linear back to its own forward (ATen's product), its panels dropped, the modules' pass back."""
    model.pass_over_rows = None
    for module in model.modules():
        if isinstance(module, nn.Linear) and PANELS in module._buffers:
            del module._buffers[PANELS]
            del module.forward
    _STATE.pop(model, None)


def attached(model: DiffusionTransformer) -> bool:
    """Whether the model's products over few rows are the kernel's now."""
    return any(PANELS in m._buffers for m in model.modules())


def few_rows_state(model: DiffusionTransformer) -> str:
    """How the model's passes over few rows run: 'ATen', the kernel (the pass in one call or its
    products only) and its panels, or 'ATen (why not the kernel)'."""
    return _STATE.get(model, "ATen")


def _stack_runs(model: DiffusionTransformer) -> bool:
    """Whether few_rows_pass computes the model's passes: every weight float32 on the CPU."""
    return all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())


def _linears(model: DiffusionTransformer) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)
            and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32]
