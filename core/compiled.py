"""The CPU's fast path: a decode's passes compiled by torch.compile (inductor's C++ backend).

In eager PyTorch a pass of the embedded model issues ~150 operators from Python, each paying
microseconds of dispatch, so a pass over 18 rows costs several times what its arithmetic does
(docs/BENCHMARKS.md, "The floor"). Compiled, a pass is one C++ function (inductor's C++ wrapper: no
Python between its kernels) whose pointwise parts are fused loops between its products. Its row
counts and the sequence length are dynamic dimensions, so a handful of graphs (the full pass and the
partial pass, each with one or several logit rows: torch specialises a size of 1) serve every
decode, over its exact rows, with no padding. Where core/few_rows.py's kernel runs, it takes the
partial passes over few rows instead (each pass in one call: less overhead than a compiled
graph's), and the compiled partial passes are only the wider ones, their products over few rows the
kernel's too. Dynamo also keys a graph on the thread count, so each
team size core/threads.py picks has its own (warm-up compiles the team's largest size and 1 thread).
A pass with a layer hook (core/layerwise.py) runs eagerly: its hook decides in Python between
layers. On a GPU the fast path is CUDA graphs and fused pointwise kernels (core/passes.py,
core/fusion.py), so `auto` compiles only on a CPU.

What it costs: ~5-20 s per graph the first time a process meets it, paid where the app and the bench
warm up (core.warmup.capture_ahead) and otherwise at the pass that meets it, on no step's clock either
way (StepEvent.capture_s); inductor's on-disk caches make a later process's compile a few seconds. The
compiled pass computes what the eager one does up to float rounding (fused loops sum in another order:
logits move by ~1e-5), so its tokens are the eager path's on the embedded model (tests/core/
test_compiled.py), not promised bit for bit.

Modes: `auto` compiles on a CPU where a C++ compiler is found, `on` wherever torch.compile works, `off`
runs eagerly. ENTROPYCACHE_COMPILE sets the default (the test suite sets off: compiling is one test
module's cost, not every test's). Whatever fails to compile runs eagerly from then on, and
`compile_state` says why.
"""

from __future__ import annotations

import os
import shutil
import time
import weakref
from collections.abc import Callable

import torch

from core import few_rows
from core.device import clock
from core.errors import error_line
from core.kv_cache import KVCache
from core.model import DiffusionTransformer
from core.refusal import check_choice

COMPILE_MODES = ("auto", "on", "off")
COMPILE_HELP = ("a CPU decode's passes compiled by torch.compile, rows and length dynamic (core/compiled.py): auto "
                "(on a CPU with a C++ compiler), on (wherever torch.compile works), off (eager)")
DEFAULT_COMPILE = os.environ.get("ENTROPYCACHE_COMPILE", "auto")
# Graphs of one compiled function, before dynamo stops compiling it: a model's few, and room for
# several models in one process (dynamo's default is 8).
MAX_GRAPHS = 64
INDUCTOR_OPTIONS = {"cpp_wrapper": True}  # the pass as one C++ function: no Python between its kernels


def check_compile(mode: object) -> str:
    """`mode` if it is one of COMPILE_MODES, else a ValueError that says what is."""
    return check_choice(mode, COMPILE_MODES, "compile")


def compiles(mode: str, model: DiffusionTransformer) -> bool:
    """Whether compile `mode` compiles `model`'s passes: auto does on one CPU device with a C++ compiler."""
    if check_compile(mode) != "auto":
        return mode == "on"
    devices = {p.device.type for p in model.parameters()}
    return devices == {"cpu"} and cpp_compiler() is not None


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would call (CXX, else c++/g++/clang++ on the PATH), or None."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    return next((path for path in map(shutil.which, names) if path), None)


def _pass(model: DiffusionTransformer, tokens: torch.Tensor, cache: KVCache, rows: torch.Tensor | None,
          logit_rows: torch.Tensor) -> torch.Tensor:
    """A pass of `rows` (None: every row) of the sequence `tokens` against `cache`: core/exact_passes.py's."""
    ids = tokens[None] if rows is None else tokens[rows][None]
    return model(ids, cache, rows, logit_rows)


class CompiledPasses:
    """One model's compiled pass, the seconds spent compiling it, and why it runs eagerly once it does."""

    def __init__(self) -> None:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, MAX_GRAPHS)
        self.compiled: Callable | None = torch.compile(_pass, fullgraph=True, dynamic=True,
                                                       options=INDUCTOR_OPTIONS)
        self.compile_s = 0.0  # on the step's clock (core/device.py), which a step's time leaves out
        self.compile_wall_s = 0.0  # what a person waited: compiler processes included
        self.ahead: set[int] = set()  # the thread counts whose graphs were compiled ahead (core.warmup)
        self.failure = ""

    def __call__(self, model: DiffusionTransformer, tokens: torch.Tensor, cache: KVCache,
                 rows: torch.Tensor | None, logit_rows: torch.Tensor) -> torch.Tensor:
        stack = model.pass_over_rows
        if self.compiled is None or (stack is not None and stack.takes(rows, None)):
            return _pass(model, tokens, cache, rows, logit_rows)
        graphs = _graphs_compiled()
        started, wall = clock(tokens.device), time.perf_counter()
        try:
            logits = self.compiled(model, tokens, cache, rows, logit_rows)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 -- no compiler, an unsupported operator: eager always works
            self.compiled, self.failure = None, error_line(e)
            return _pass(model, tokens, cache, rows, logit_rows)
        if _graphs_compiled() != graphs:  # this call compiled a graph: its time is compiling, not the pass's
            self.compile_s += clock(tokens.device) - started
            self.compile_wall_s += time.perf_counter() - wall
        return logits


def _graphs_compiled() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> CompiledPasses


def set_compile(model: DiffusionTransformer, mode: str) -> None:
    """Run `model`'s passes compiled (when `mode` compiles for this model, see `compiles`), their products
    over few rows through core/few_rows.py's kernel where it runs, or eagerly with ATen's products (the
    reference). Each graph compiles at the first pass that needs it, or ahead (core.warmup.capture_ahead)."""
    if compiles(mode, model):
        if model not in _COMPILED:
            _COMPILED[model] = CompiledPasses()
            few_rows.attach(model)
    else:
        _COMPILED.pop(model, None)
        few_rows.detach(model)


def compiled_passes(model: DiffusionTransformer) -> CompiledPasses | None:
    """The model's compiled passes, if set_compile compiles them."""
    return _COMPILED.get(model)


def compile_state(model: DiffusionTransformer) -> str:
    """How the model's passes run: 'eager', 'compiled', or 'eager (why compiling failed)'."""
    passes = _COMPILED.get(model)
    if passes is None:
        return "eager"
    return "compiled" if not passes.failure else f"eager ({passes.failure})"
