"""How the decoder runs a step's forward pass: over the exact rows (core/exact_passes.py), or at fixed
shapes that a CUDA graph can replay, the static path here; and which of them a decode runs (passes_for).

In eager PyTorch a cached pass of an 8B model issues ~500 small operators from Python, and on a GPU
the host issuing them, not the GPU, sets the pace (docs/BENCHMARKS.md, "On a GPU"). A CUDA graph
records a pass's kernels once and replays them with one call, but only at fixed shapes and fixed
addresses. So the static path gives every pass one of a few shapes and takes its inputs from
preallocated buffers:

- the rows a partial pass computes are padded to a bucket size (ROW_BUCKETS) by repeating the last
  row: a repeated row computes the same K/V as the row it repeats and writes them to the same slot,
  so the cache ends as it would without padding;
- the rows whose logits are read are padded to the block length the same way, and only the real
  ones are handed back;
- the token ids come from the workspace's token buffer (the decode's sequence), gathered inside the
  pass, and the KV cache is the workspace's own.

A Workspace holds those buffers for one (sequence length, block length). On a GPU a graph is
captured the first time a shape is needed (one per bucket, one for the full pass), all of a model's
graphs share one memory pool, and they stay with their workspace, which goes back to the model's
pool when its decode ends: the next decode of that length, in another race or for another visitor,
replays them. Capture time is reported apart from the step's time (StepEvent.capture_s). On the CPU,
or with capture switched off, the same padded passes run eagerly: the CPU tests what a GPU replays.
A capture that fails (an operation the device cannot record, a driver that refuses) is not an error:
from then on every pass of that model in this process runs eagerly, every lane of a race alike, and
`capture_failure(model)` says why (the app says so in the race's status line); `release_graphs`
forgets it, so the next decode tries again.

A pass with a layer hook (the layer-wise policies, core/layerwise.py) runs eagerly over its exact
rows, since the hook chooses rows and reads signals in Python between layers.

On a CPU the fast path is the other one: the exact rows' passes compiled by inductor (core/compiled.py),
with dynamic shapes, so nothing is padded. Capturing or compiling them before a decode needs them is
core/warmup.py's.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from core.config import check_graphs
from core.errors import error_line
from core.exact_passes import Passes, host_index
from core.layerwise import LayerHook
from core.model import DiffusionTransformer

# Partial passes are padded to the next of these row counts: powers of two and 1.5 times them, so
# padding adds at most half the rows (a GPU pass over a few dozen rows costs what reading the
# weights costs, whatever the count) and a length needs at most ~2 log2(length) graphs.
ROW_BUCKETS = tuple(sorted({b for e in range(3, 16) for b in (2**e, 3 * 2 ** (e - 1))}))
MAX_IDLE_WORKSPACES = 4  # per model: each holds a KV cache (0.66 GB for an 8B model at 1256 positions)


def bucket(rows: int, length: int) -> int:
    """The padded row count of a partial pass over `rows` rows of a `length`-position sequence."""
    return min(next((b for b in ROW_BUCKETS if b >= rows), length), length)


def uses_static_passes(mode: str, model: DiffusionTransformer) -> bool:
    """Whether `graphs=mode` runs the static path for `model`: auto does on one CUDA device."""
    if check_graphs(mode) == "off":
        return False
    single_gpu = single_cuda_device(model) is not None
    if mode == "on" and not single_gpu and len(_devices(model)) > 1:
        raise ValueError("graphs=on needs the model on one device; it is spread over "
                         f"{', '.join(sorted(map(str, _devices(model))))} (use graphs=off)")
    return mode == "on" or single_gpu


class Workspace(Passes):
    """Preallocated buffers for the passes of one sequence length, and their graphs (module docstring)."""

    entropies_in_readout = True

    def __init__(self, model: DiffusionTransformer, length: int, block_len: int, pool: object | None) -> None:
        super().__init__(model, length)
        self.block_len = block_len
        self.pool = pool  # the model's graph memory pool; None: no capture, the passes run eagerly
        # One buffer for both index lists, so that a step copies its indices to the device once:
        # a pass of bucket b reads its rows from [:b] and its logit rows from [b : b + block_len].
        self.index = torch.zeros(length + block_len, dtype=torch.long, device=self.device)
        self.graphs: dict[int | None, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.capture_s = 0.0

    def start(self, prompt: list[int]) -> None:
        super().start(prompt)
        for layer in range(self.cache.n_layers):  # a reused workspace holds the last decode's K/V
            self.cache.k[layer].zero_()
            self.cache.v[layer].zero_()
        for outputs in (self.cache.attn_out, self.cache.ffn_out):
            for t in outputs:
                t.zero_()

    def run(self, model: DiffusionTransformer, rows: list[int] | None, needed: list[int],
            hook: LayerHook | None = None) -> torch.Tensor:
        """As Passes.run. On a GPU the logits are a view of the graph's output, which every graph of the
        model shares memory with: read them before the model's next pass."""
        if hook is not None:
            return super().run(model, rows, needed, hook)
        size = None if rows is None else bucket(len(rows), self.length)
        padded_rows = [] if rows is None else _padded(rows, size)
        self.index[: len(padded_rows) + self.block_len].copy_(
            host_index(padded_rows + _padded(needed, self.block_len)), non_blocking=True)
        logits = self._replay(model, size) if self._capturing(model) else self._pass(model, size)
        return logits[0, : len(needed)]

    def _capturing(self, model: DiffusionTransformer) -> bool:
        return self.pool is not None and not capture_failure(model)

    def capture(self, model: DiffusionTransformer, sizes: Sequence[int | None]) -> None:
        """Capture the graphs of these passes now (None: the full pass), e.g. while an app warms up,
        so that no decode's first steps wait for them. What the passes compute is thrown away: the
        workspace's next decode starts over (`start`)."""
        for size in (size for size in sizes if size not in self.graphs):
            if not self._capturing(model):
                return
            rows, logit_rows = self._views(size)
            logit_rows.zero_()  # positions the pass computes
            if rows is not None:
                rows.copy_(torch.arange(size, device=self.device))
            self._try_capture(model, size)

    def _views(self, size: int | None) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(the rows of a pass of `size` rows, None for the full pass; its logit rows)."""
        offset = size or 0
        rows = None if size is None else self.index[:size]
        return rows, self.index[offset : offset + self.block_len]

    def _pass(self, model: DiffusionTransformer, size: int | None) -> torch.Tensor:
        rows, logit_rows = self._views(size)
        ids = self.tokens[None] if rows is None else self.tokens[rows][None]
        return model(ids, self.cache, rows, logit_rows)

    def _replay(self, model: DiffusionTransformer, size: int | None) -> torch.Tensor:
        if size not in self.graphs and not self._try_capture(model, size):
            return self._pass(model, size)  # the same pass, eagerly (it writes the same K/V again)
        graph, logits = self.graphs[size]
        with torch.cuda.device(self.device):  # on the current stream of the model's GPU, after the step's copies
            graph.replay()
        return logits

    def _try_capture(self, model: DiffusionTransformer, size: int | None) -> bool:
        """_capture, or, if it fails, the failure recorded for the model (not an out-of-memory: that is
        the run's to report); whether the graph is there."""
        try:
            self._capture(model, size)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001 -- whatever refused the capture, the passes still run eagerly
            _capture_failed(model, e)
            return False
        return True

    def _capture(self, model: DiffusionTransformer, size: int | None) -> None:
        """Record the pass of `size` rows. The warm-up pass before it really runs, with this step's
        inputs: it writes the K/V the replay will write again (the same rows from the same inputs).
        One capture at a time in the process, and never beside empty_cuda_cache."""
        started = time.perf_counter()
        with _CAPTURE_LOCK, torch.cuda.device(self.device):
            side, current = torch.cuda.Stream(self.device), torch.cuda.current_stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):  # capture wants its allocations and lazy inits made off the default stream
                self._pass(model, size)
            current.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=side, capture_error_mode="thread_local"):
                logits = self._pass(model, size)
            torch.cuda.synchronize(self.device)
        self.graphs[size] = (graph, logits)
        self.capture_s += time.perf_counter() - started


def _padded(positions: list[int], size: int) -> list[int]:
    return positions + positions[-1:] * (size - len(positions))


class _ModelWorkspaces:
    """A model's idle workspaces (most recently used last), the memory pool their graphs share, and why
    capturing failed, once it did."""

    def __init__(self, capture: bool) -> None:
        self.pool = _graph_pool() if capture else None
        self.idle: list[Workspace] = []
        self.failure = ""


def _graph_pool() -> object:
    return torch.cuda.graph_pool_handle()


_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> _ModelWorkspaces
_LOCK = threading.Lock()
_CAPTURE_LOCK = threading.Lock()
_capture_enabled = True


@contextmanager
def passes_for(model: DiffusionTransformer, length: int, block_len: int, mode: str) -> Iterator[Passes]:
    """The passes of one decode of `length` positions: a workspace from the model's pool (returned to it
    afterwards) on the static path, else fresh eager buffers."""
    if not uses_static_passes(mode, model):
        yield Passes(model, length)
        return
    workspace = _take(model, length, block_len)
    try:
        yield workspace
    finally:
        _give_back(model, workspace)


def _take(model: DiffusionTransformer, length: int, block_len: int) -> Workspace:
    capture = _capture_enabled and single_cuda_device(model) is not None
    with _LOCK:
        owned = _WORKSPACES.get(model)
        if owned is None or (owned.pool is not None) != capture:
            owned = _WORKSPACES[model] = _ModelWorkspaces(capture)
        for i, ws in enumerate(owned.idle):
            if (ws.length, ws.block_len) == (length, block_len):
                return owned.idle.pop(i)
    if capture:  # a graph reads RoPE tables at fixed addresses: build them once, for every position
        model.reserve_rope(model.config.max_seq_len, model.embed.weight.device)
    return Workspace(model, length, block_len, owned.pool)


def _give_back(model: DiffusionTransformer, workspace: Workspace) -> None:
    with _LOCK:
        owned = _WORKSPACES.get(model)
        if owned is None or owned.pool is not workspace.pool:  # released, or the capture switch moved
            return
        owned.idle.append(workspace)
        del owned.idle[:-MAX_IDLE_WORKSPACES]


def capture_failure(model: DiffusionTransformer) -> str:
    """Why capturing the model's graphs failed in this process ('' if it has not): every pass of the
    model runs eagerly since."""
    owned = _WORKSPACES.get(model)
    return owned.failure if owned is not None else ""


def _capture_failed(model: DiffusionTransformer, error: Exception) -> None:
    """Record the first failure; the idle workspaces' graphs go (no pass replays them any more)."""
    with _LOCK:
        owned = _WORKSPACES.get(model)
        if owned is None or owned.failure:
            return
        owned.failure = error_line(error)
        for ws in owned.idle:
            ws.graphs.clear()


def idle_workspaces(model: DiffusionTransformer) -> list[Workspace]:
    """The model's workspaces not in use, most recently used last (for warm-up and reports)."""
    with _LOCK:
        owned = _WORKSPACES.get(model)
        return list(owned.idle) if owned else []


def empty_cuda_cache() -> None:
    """torch.cuda.empty_cache(), once no graph is being captured: emptying the allocator's cache while
    another thread captures breaks that capture (an app frees a finished CPU run's memory while a GPU
    run may be warming up)."""
    if torch.cuda.is_available():
        with _CAPTURE_LOCK:
            torch.cuda.empty_cache()


def release_graphs(model: DiffusionTransformer) -> None:
    """Drop the model's workspaces and graphs (and with them their memory), e.g. when it is unloaded.
    A model that is garbage-collected loses them anyway."""
    with _LOCK:
        _WORKSPACES.pop(model, None)


@contextmanager
def capture_off() -> Iterator[None]:
    """Inside, the static path runs its padded passes eagerly even on a GPU (the check that a replay
    equals the same passes run eagerly). Workspaces made outside are not reused inside, nor after."""
    global _capture_enabled
    previous, _capture_enabled = _capture_enabled, False
    try:
        yield
    finally:
        _capture_enabled = previous


def _devices(model: DiffusionTransformer) -> set[torch.device]:
    return {p.device for p in model.parameters()}


def single_cuda_device(model: DiffusionTransformer) -> torch.device | None:
    """The CUDA device `model` is on, if it is all on one; else None (a CPU, or spread over several)."""
    devices = _devices(model)
    device = next(iter(devices))
    return device if len(devices) == 1 and device.type == "cuda" else None
