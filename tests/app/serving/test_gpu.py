"""The ZeroGPU decorator (app/serving/gpu.py): applied where `spaces` is installed, and nowhere else."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import app.serving.gpu


def test_zero_gpu_decorator_is_applied_only_when_spaces_is_installed(monkeypatch) -> None:
    decorated = []

    def gpu(duration: int):
        def wrap(fn):
            decorated.append((fn.__name__, duration))
            return fn

        return wrap

    def work() -> None:
        pass

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=gpu))
    try:
        gpu_mod = importlib.reload(app.serving.gpu)
        gpu_mod.on_gpu(work)
        assert decorated == [("work", gpu_mod.GPU_DURATION_S)]
    finally:
        monkeypatch.delitem(sys.modules, "spaces")
        gpu_mod = importlib.reload(app.serving.gpu)
    if importlib.util.find_spec("spaces") is None:
        assert gpu_mod.spaces is None and gpu_mod.on_gpu(len) is len
