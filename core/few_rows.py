"""Matrix products over few rows on the CPU: core/few_rows.cpp, built once per machine, with each model's
weights laid out for it once.

A partial pass multiplies ~18 rows by every weight matrix. ATen's product (MKL) packs the weight again
at every call, a cost that does not shrink with the rows, so those products ran at a third to a half
of the rate of a full pass's and were most of a partial pass's time (docs/BENCHMARKS.md, "The
floor"). The kernel multiplies weights laid out once in panels: bfloat16 where every weight of a
matrix is exactly one (a bf16 checkpoint loaded in float32, as the embedded model and LLaDA are: the
same values from half the bytes), float32 otherwise. Its sums are float32 multiply-add chains over
k, so it computes what F.linear does up to float rounding, like the compiled passes it serves
(core/compiled.py): the eager path's tokens on the embedded model (tests/core/test_compiled.py), not
promised bit for bit.

Where it applies: every float32 nn.Linear of a model whose passes compile on the CPU
(core.compiled.set_compile attaches it and detaches it; eager passes stay ATen's, the reference). A
product over more than MAX_ROWS rows is ATen's inside the same operator, so one compiled graph serves
every row count; so is one that needs a gradient.
What it costs: a build of ~10 s the first time on a machine (torch's extension cache keeps it for the
next process; it needs the C++ compiler that compiling passes needs, and ninja), and the panels'
memory: half the float32 weights' in bfloat16, as much again in float32. Where the CPU lacks AVX-512
or the build fails, products stay ATen's and `few_rows_state` says why.
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
from core.model import DiffusionTransformer

SOURCE = Path(__file__).with_name("few_rows.cpp")
NAME = "entropycache_few_rows"  # the extension's, and its folder's in torch's extension cache
STALE_LOCK_S = 600.0  # a build takes ~10 s: a lock this old is a killed build's
# Rows past which ATen's product is as fast as the kernel's (24 products of the embedded model in
# sequence, 2 threads: 4.1 against 5.8 ms at 96 rows, 6.7 against 5.5 ms at 128).
MAX_ROWS = 96
PANELS = "few_rows_panels"  # the buffer each Linear holds its panels in
_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> how its products run (attach)


@functools.cache
def build() -> tuple[str, float]:
    """Why the kernel cannot run here ('' when it is built and loaded), and the seconds building or
    loading it took: it needs AVX-512, and a build once per machine and source (torch's extension cache
    keeps it for later processes, which only load it)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return f"this CPU has no AVX-512 ({torch.backends.cpu.get_cpu_capability()})", 0.0
    started = time.perf_counter()
    try:
        from torch.utils.cpp_extension import get_default_build_root, load

        folder = Path(get_default_build_root()) / NAME
        folder.mkdir(parents=True, exist_ok=True)
        _drop_stale_lock(folder / "lock")
        load(NAME, [str(SOURCE)], extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"],
             build_directory=str(folder), is_python_module=False)
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
    dtypes = {getattr(module, PANELS).dtype for module in linears}
    layout = " and ".join("bfloat16" if d == torch.bfloat16 else "float32" for d in sorted(dtypes, key=str))
    _STATE[model] = f"few-row kernel up to {MAX_ROWS} rows, {layout} panels (built or loaded in {seconds:.1f} s)"


def detach(model: DiffusionTransformer) -> None:
    """Every Linear back to its own forward (ATen's product), its panels dropped."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and PANELS in module._buffers:
            del module._buffers[PANELS]
            del module.forward
    _STATE.pop(model, None)


def attached(model: DiffusionTransformer) -> bool:
    """Whether the model's products over few rows are the kernel's now."""
    return any(PANELS in m._buffers for m in model.modules())


def few_rows_state(model: DiffusionTransformer) -> str:
    """How the model's products run: 'ATen', the kernel and its panels, or 'ATen (why not the kernel)'."""
    return _STATE.get(model, "ATen")


def _linears(model: DiffusionTransformer) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)
            and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32]
