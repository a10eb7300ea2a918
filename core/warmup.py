"""Passes prepared before a decode needs them, so that no decode's first steps wait: on the static path
its CUDA graphs captured (core/passes.py), where the passes compile (core/compiled.py) their graphs
compiled; and what that paid for, in words (prepared_by). An app does this while it warms up, or before
a race starts; the bench, before it times.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from core.compiled import compiled_passes
from core.few_rows import MAX_ROWS
from core.model import DiffusionTransformer
from core.passes import Passes, bucket, passes_for, uses_static_passes
from core.threads import TEAM


def capture_ahead(model: DiffusionTransformer, length: int, block_len: int, mode: str = "auto",
                  max_rows: int | None = None, lanes: int = 2) -> float:
    """Capture now, in `lanes` workspaces of `length` positions, the graphs of the full pass and of every
    partial pass of up to `max_rows` rows (default two blocks: EntropyCache's partial passes, a block's
    masks and its last and k recent tokens, and Fast-dLLM's, a block, fit), so that the next `lanes`
    decodes of that length at once (a race's two lanes) replay them from their first step: what an
    app does while it warms up, or before a race starts. Where the passes are compiled instead
    (core/compiled.py), compile them now. Returns the seconds it took (0 where nothing is captured or
    compiled: an eager CPU, graphs off, or a length past the model's positions, which no decode takes)."""
    if length > model.config.max_seq_len:
        return 0.0
    if not uses_static_passes(mode, model):
        return _compile_ahead(model, length, block_len) if compiled_passes(model) is not None else 0.0
    max_rows = 2 * block_len if max_rows is None else max_rows
    sizes = [None, *sorted({bucket(n, length) for n in range(1, max_rows + 1)})]
    with torch.no_grad(), ExitStack() as held:
        workspaces = [held.enter_context(passes_for(model, length, block_len, mode)) for _ in range(lanes)]
        before = sum(ws.capture_s for ws in workspaces)
        for ws in workspaces:
            ws.capture(model, sizes)
        return sum(ws.capture_s for ws in workspaces) - before


CAPTURED = "CUDA graphs captured"
COMPILED = "passes compiled"


def prepared_by(model: DiffusionTransformer) -> str:
    """What capture_ahead and a step's capture_s pay for with this model, in words: capturing CUDA graphs,
    or compiling its passes (core/compiled.py)."""
    return COMPILED if compiled_passes(model) is not None else CAPTURED


def _compile_ahead(model: DiffusionTransformer, length: int, block_len: int) -> float:
    """Compile the model's passes now by running one of each kind a decode meets (full and partial, with
    one and with several logit rows; partial only past the rows that core/few_rows.py's layers in one
    call take, where they run), at distinct sizes so that each graph serves any size, on the team
    sizes of an idle and of a busy machine (core/threads.py); the seconds compiling took (0 when every
    graph was there). The K/V they write are thrown away with their buffers."""
    compiled = compiled_passes(model)
    most = torch.get_num_threads()
    teams = sorted(({most, 1} if TEAM.adaptive else {most}) - compiled.ahead, reverse=True)
    if not teams:  # every graph is there, for any length and block: nothing to run
        return 0.0
    block_len = min(block_len, length - 1)
    passes = Passes(model, length)
    waited = compiled.compile_wall_s
    block = list(range(length - block_len, length))
    kinds = [(None, block), (None, block[:1])]
    if model.pass_over_rows is None:
        kinds += [(block[:-2] + [block[-1]], block[1:-2]), (block[-2:], block[-1:]), (block[-1:], block[-1:])]
    elif length > MAX_ROWS + 1:  # partial passes the pass in one call takes do not compile: only wider ones
        wide = list(range(length - MAX_ROWS - 1, length))
        kinds += [(wide, block[1:-2]), (wide, block[-1:])]
    try:
        for threads in teams:
            torch.set_num_threads(threads)
            with torch.no_grad():
                for rows, needed in kinds:
                    passes.run(model, rows, needed, threads=threads)
            compiled.ahead.add(threads)
    finally:
        torch.set_num_threads(most)
    return compiled.compile_wall_s - waited
