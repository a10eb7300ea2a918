"""core/fusion.py on the CPU: the fused path changes nothing but speed.

The fused path hands the very functions the eager path runs (core/model.py POINTWISE) to torch.compile.
Here the compiler backend is one that records each graph Dynamo captures and runs it as captured:
the same torch operations, in the same order, on the same inputs as the eager functions. So every
float is the same and the tokens are equal by construction, not by rounding luck: these tests cannot
flake. What they check is what a GPU would otherwise find first: that every part compiles as one
graph (fullgraph) at every shape a decode meets, that every block runs its pointwise work through the
compiled parts, and that a part which fails to compile falls back to eager without changing a token.
Inductor's own kernels round differently (a fused reduction sums in another order): that comparison
is the GPU check's (scripts/gpu_check.py, >= 99% of positions), and a CPU compile of them is below,
opt-in, since Inductor's C++ compile takes most of a minute on a 2-core machine.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from tiny_models import tiny_model

import core
from core.config import DecodeConfig
from core.decoder import decode
from core.fusion import FusedPart, check_fusion, compiles, fusion_state, set_fusion
from core.model import POINTWISE
from core.passes import idle_workspaces, passes_for
from core.policies import TABLE_ORDER, make_policy
from evaluation.tasks import held_out


class Recording:
    """A torch.compile backend that runs each captured graph as captured, and remembers it."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs) -> object:
        self.graphs.append(gm)
        return gm.forward


def failing_backend(gm, example_inputs):
    raise RuntimeError("no compiler here\nsecond line")


@pytest.fixture(scope="module")
def embedded():
    model, tokenizer = core.load_model()
    yield model, tokenizer
    set_fusion(model, "off")


def decoded(model, ids: list[int], name: str) -> list[tuple]:
    """Every step of a decode on the static path (the padded passes a GPU replays), two blocks."""
    config = DecodeConfig(gen_len=16, block_len=8, graphs="on")
    return [(e.tokens, e.unmasked, e.full, e.rows, e.layer_rows, e.reason) for e in
            decode(model, ids, make_policy(name), config)]


def test_the_fused_path_gives_the_embedded_models_tokens_for_every_policy(embedded):
    model, tokenizer = embedded
    prompts = [core.chat_prompt_ids(tokenizer, item.prompt) for item in held_out("mix", 2)]  # a sum, a story
    set_fusion(model, "off")
    eager = {(i, name): decoded(model, ids, name) for i, ids in enumerate(prompts) for name in TABLE_ORDER}
    backend = Recording()
    set_fusion(model, "on", backend=backend)
    try:
        assert fusion_state(model) == "compiled"
        for (i, name), expected in eager.items():
            assert decoded(model, prompts[i], name) == expected, (i, name)
    finally:
        set_fusion(model, "off")
    assert fusion_state(model) == "eager"
    # every part was compiled, each as one graph per shape guard (fullgraph), and each graph holds the
    # part's whole arithmetic: a norm's float32 cast and its weight, RoPE's two products and its sum
    targets = [{str(n.target) for n in gm.graph.nodes if n.op == "call_function"} for gm in backend.graphs]
    assert any("<built-in function mul>" in t and any("rms_norm" in x for x in t) for t in targets)
    assert sum(any("cat" in x for x in t) for t in targets) >= 1
    assert any(any("silu" in x for x in t) for t in targets)
    assert len(backend.graphs) >= len(POINTWISE)


def test_every_block_runs_its_pointwise_work_through_the_models_shared_parts():
    model = tiny_model("dream")
    ids = torch.randint(0, 40, (1, 12))
    calls: dict[str, int] = dict.fromkeys(POINTWISE, 0)

    def counted(name):
        def part(*args):
            calls[name] += 1
            return POINTWISE[name](*args)
        return part

    with torch.no_grad():
        reference = model.full_logits(ids)
        model.pointwise.use({name: counted(name) for name in POINTWISE})
        assert torch.equal(model.full_logits(ids), reference)
    n = model.config.n_layers
    # per layer: the attention norm, RoPE, the residual add with the FFN norm, gate * up; then the final norm
    assert calls == {"rms_norm": n + 1, "add_rms_norm": n, "rope": n, "swiglu": n}


def test_a_part_that_fails_to_compile_runs_eagerly_and_says_why(family):
    model = tiny_model(family)
    config = DecodeConfig(gen_len=16, block_len=8)
    expected = [e.tokens for e in decode(model, [3, 9, 4, 12], make_policy("entropy", tau=0.5), config)]
    set_fusion(model, "on", backend=failing_backend)
    got = [e.tokens for e in decode(model, [3, 9, 4, 12], make_policy("entropy", tau=0.5), config)]
    assert got == expected
    state = fusion_state(model)
    assert state.startswith("compiled; ") and state.count("eager (") == len(POINTWISE)
    assert "rope eager (BackendCompilerFailed:" in state and "second line" not in state


def test_modes_are_checked_and_auto_leaves_a_cpu_model_eager():
    model = tiny_model()
    assert not compiles("auto", model) and compiles("on", model) and not compiles("off", model)
    with pytest.raises(ValueError, match="fusion must be one of auto, on, off, got 'fast'"):
        check_fusion("fast")
    with pytest.raises(ValueError, match="fusion must be one of auto, on, off, got 'yes'"):
        core.load_model(fusion="yes")
    set_fusion(model, "auto")
    assert fusion_state(model) == "eager" and model.pointwise.rope is POINTWISE["rope"]


def test_switching_fusion_drops_the_graphs_captured_with_the_other_kernels():
    model = tiny_model()
    with torch.no_grad(), passes_for(model, 24, 8, "on"):
        pass
    assert len(idle_workspaces(model)) == 1
    set_fusion(model, "on", backend=Recording())
    assert idle_workspaces(model) == []
    assert all(isinstance(getattr(model.pointwise, name), FusedPart) for name in POINTWISE)


@pytest.mark.skipif(os.environ.get("ENTROPYCACHE_COMPILE_TEST") != "1",
                    reason="Inductor's C++ compile of the four parts takes 30-50 s on a 2-core CPU, past a unit "
                           "test's budget: set ENTROPYCACHE_COMPILE_TEST=1 to run it")
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="no C++ compiler here")
def test_inductor_compiles_every_part_and_the_logits_agree_within_float32_rounding():
    """Inductor's kernels sum in another order than aten's: logits agree to float32 rounding (a
    tolerance a thousand times that rounding, not equality); no part fell back to eager."""
    model = tiny_model("dream")
    ids = torch.randint(0, 40, (1, 12))
    with torch.no_grad():
        reference = model.full_logits(ids)
        set_fusion(model, "on")
        fused = model.full_logits(ids)
        cache = model.new_cache(1, 12)
        model(ids, cache)
        partial = model(ids[:, 4:], cache, torch.arange(4, 12))  # another row count: the dynamic-shape graph
    assert fusion_state(model) == "compiled"
    assert torch.allclose(fused, reference, rtol=1e-4, atol=1e-4)
    assert partial.shape == (1, 8, model.config.vocab_size)
