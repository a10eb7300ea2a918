"""Check 5: each fused graphed decode against its own eager run (equal, or the graphs are wrong) and
against today's unfused path (bf16 sums in another order: an agreement)."""

from __future__ import annotations

from core.config import DecodeConfig
from core.passes import capture_off, release_graphs
from core.policies import make_policy
from scripts.gpu_checks.end_to_end import timed_decode
from scripts.gpu_checks.replayed import ReplayedEntropy
from scripts.gpu_checks.shapes import BLOCK, prompt_ids


def equality_tokens(model, length: tuple[int, int], blocks) -> dict[str, list[int]]:
    """The tokens of none and replayed EntropyCache on the current path, four tokens a step over the
    whole response (every position counts in an agreement)."""
    prompt, gen = length
    config = DecodeConfig(gen_len=gen, block_len=BLOCK, steps=gen // 4, stop_at_eos=False, graphs="on")
    out = {}
    for name in ("none", "entropy"):
        policy = make_policy("none") if name == "none" else ReplayedEntropy(blocks)
        out[name] = timed_decode(model, prompt_ids(model, prompt), policy, config, None)["tokens"]
    release_graphs(model)
    return out


def equality(model, length: tuple[int, int], blocks, unfused: dict[str, list[int]]) -> dict:
    """Each fused graphed decode against its own eager run (the same padded passes and compiled kernels
    without graphs: identical, or the graphs are wrong) and against today's unfused graphed decode
    (`unfused`; compiled kernels round bf16 sums in another order, so positions may differ)."""
    graphed = equality_tokens(model, length, blocks)
    with capture_off():
        own_eager = equality_tokens(model, length, blocks)
    return {name: dict(fused_equals_own_eager=graphed[name] == own_eager[name],
                       agreement_with_unfused=sum(a == b for a, b in zip(graphed[name], unfused[name]))
                       / len(graphed[name]))
            for name in graphed}
