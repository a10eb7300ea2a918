"""Fused pointwise kernels: a layer's norms, RoPE, gated activation and residual add compiled into a
few kernels, or run as written.

Eager, each RMSNorm of a layer is four or five kernels (float32 cast, the norm's reductions, the cast
back, the weight), RoPE about eight (slices, negation, concatenation, casts, products, sum), the gated
activation two and the residual add one, each reading and writing its rows in full. In a pass over a
few dozen rows every one of them is a launch that costs more than its work; over a thousand rows
their float32 intermediates are a sizeable share of the memory traffic between the matmuls.
Compiled, a layer's pointwise work is five kernels: the attention norm, RoPE of its queries and keys,
the residual add with the FFN norm, gate * up, and the block's last residual add (one kernel either way).

The compiled functions are the very functions the eager path runs (core/model.py POINTWISE), each
compiled as one graph (fullgraph) by torch.compile; a part that fails to compile runs eagerly from
then on, and `fusion_state` says why. The static path of core/passes.py captures compiled kernels in
its CUDA graphs like any other: a shape is first met (and compiled) in the warm-up pass that comes
before each capture. Switching the mode drops the model's graphs, which replay the kernels they were
captured with.

Modes: `auto` compiles on a single plain CUDA GPU where Triton is installed and leaves the parts
eager elsewhere: on a CPU (compiling took 27-76 s there for a speedup of 2.20x against 2.15x eager,
docs/BENCHMARKS.md "Tried and dropped") and on ZeroGPU, which does not support
torch.compile (the app switches fusion off there). `on` compiles wherever torch.compile works (a CPU
needs a C++ compiler), `off` runs every part eagerly.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from core.errors import error_line
from core.model import POINTWISE, DiffusionTransformer
from core.passes import release_graphs, single_cuda_device
from core.refusal import check_choice

FUSION_MODES = ("auto", "on", "off")
FUSION_HELP = ("a layer's norms, RoPE, residual add and gate * up compiled into fused kernels: auto (on a "
               "single CUDA GPU with Triton), on (wherever torch.compile works), off (eager)")


def check_fusion(mode: object) -> str:
    """`mode` if it is one of FUSION_MODES, else a ValueError that says what is."""
    return check_choice(mode, FUSION_MODES, "fusion")


def compiles(mode: str, model: DiffusionTransformer) -> bool:
    """Whether fusion `mode` compiles `model`'s pointwise parts: auto does on one CUDA device with Triton."""
    if check_fusion(mode) != "auto":
        return mode == "on"
    return single_cuda_device(model) is not None and importlib.util.find_spec("triton") is not None


class FusedPart:
    """One pointwise part compiled, falling back to the function itself if compiling it fails."""

    def __init__(self, fn: Callable, backend: str | Callable) -> None:
        self.fn = fn
        self.compiled: Callable | None = torch.compile(fn, backend=backend, fullgraph=True)
        self.failure = ""  # why it runs eagerly, once it does

    def __call__(self, *args):
        if self.compiled is None:
            return self.fn(*args)
        try:
            return self.compiled(*args)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 -- any failure to compile: eager always works
            self.compiled, self.failure = None, error_line(e)
            return self.fn(*args)


def set_fusion(model: DiffusionTransformer, mode: str, backend: str | Callable = "inductor") -> None:
    """Run `model`'s pointwise parts compiled by torch.compile's `backend` (when `mode` compiles for this
    model, see `compiles`) or eagerly. Drops the model's captured CUDA graphs."""
    parts = {name: FusedPart(fn, backend) for name, fn in POINTWISE.items()} if compiles(mode, model) else POINTWISE
    model.pointwise.use(parts)
    release_graphs(model)


def fusion_state(model: DiffusionTransformer) -> str:
    """How the model's pointwise parts run now: 'eager', 'compiled', or compiled with the parts that
    failed to compile and why."""
    parts = [getattr(model.pointwise, name) for name in POINTWISE]
    fused = [part for part in parts if isinstance(part, FusedPart)]
    if not fused:
        return "eager"
    failed = [f"{name} eager ({part.failure})" for name, part in zip(POINTWISE, parts) if part.failure]
    return "compiled" + (f"; {', '.join(failed)}" if failed else "")
