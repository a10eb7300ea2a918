"""Stand-ins for the serving machinery's tests: a registry of nothing, a context on it, a 'GPU' model that is the
embedded one on the CPU, and ZeroGPU's pickling of a runner's arguments."""

import pickle
from types import SimpleNamespace

import app.serving.registry
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL, ModelChoice, ModelRegistry

STUB_MODEL = SimpleNamespace(label="m", device="cpu")  # the stub registry's model, as a view holds it


class StubRegistry:
    """One CPU model 'm', always loaded, that is nothing: for tests of the serving machinery alone."""

    labels = ["m"]

    def choice(self, label):
        return SimpleNamespace(label=label, device="cpu")

    def is_loaded(self, label):
        return True

    def load(self, choice):
        return object(), object()


def stub_context() -> AppContext:
    """An AppContext on StubRegistry whose warm load hands back two placeholders for the model and its
    tokenizer: a runner's turns, places and stops without a model behind them."""
    ctx = AppContext(StubRegistry())
    ctx.load_warm = lambda choice: (object(), object())
    return ctx


def fake_zero_gpu(runner) -> list[tuple]:
    """Route a tab runner's gpu_snapshots (app/serving/runner.py) through a pickle round trip of its arguments,
    as spaces.GPU hands them to its forked worker; returns the list of argument tuples the 'worker' received."""
    sent = []

    def gpu_snapshots(*args):
        sent.append(pickle.loads(pickle.dumps(args)))
        return runner.snapshots(*sent[-1])

    runner.gpu_snapshots = gpu_snapshots
    return sent


def gpu_stand_in(registry, monkeypatch, graphs: str = "auto"):
    """A registry with one 'gpu' model (cuda device) that is really `registry`'s embedded model on the CPU,
    its passes run as `graphs` says."""
    monkeypatch.setattr(app.serving.registry, "load_model",
                        lambda source, device, fusion, compile_mode: registry.get(EMBEDDED_LABEL))
    examples = registry.choice(EMBEDDED_LABEL).example_list  # the warm-up reads the long one: the model must read it
    return ModelRegistry([ModelChoice("gpu", "x", "cuda", 32, 16, examples)], graphs=graphs)
