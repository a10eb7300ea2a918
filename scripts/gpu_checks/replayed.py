"""EntropyCache's full/partial decisions as the embedded model makes them on held-out problems, recorded
and replayed on a model of random weights (whose entropies mean nothing)."""

from __future__ import annotations

from core.config import DecodeConfig
from core.decoder import decode
from core.loading import chat_prompt_ids
from core.policies import make_policy
from core.policies.entropy import EntropyCache
from evaluation.tasks.word_problems import make_split
from scripts.gpu_checks.shapes import BLOCK, TAU, K


class ReplayedEntropy(EntropyCache):
    """EntropyCache's rows, with its full/partial decisions replayed from a recorded schedule:
    per block, the full flag of each step (a step past a recorded block's end is partial)."""

    def __init__(self, blocks: list[list[bool]]) -> None:
        super().__init__(tau=TAU, k=K)
        self.blocks = blocks

    def plan(self, ctx):
        recorded = self.blocks[ctx.block % len(self.blocks)]
        self.full_next = ctx.block_step < len(recorded) and recorded[ctx.block_step]
        self.last_entropy = 0.0 if ctx.step else None
        return super().plan(ctx)


def schedule(model, tokenizer, threshold: float | None, n: int) -> tuple[list[list[bool]], float]:
    """The embedded model's EntropyCache schedule on held-out problems: per block, its steps' full
    flags; and the mean tokens unmasked per step."""
    blocks, tokens, steps = [], 0, 0
    config = DecodeConfig(gen_len=64, block_len=BLOCK, threshold=threshold, stop_at_eos=False)
    for problem in make_split("test", n):
        current: dict[int, list[bool]] = {}
        for e in decode(model, chat_prompt_ids(tokenizer, problem.prompt), make_policy("entropy", tau=TAU, k=K),
                        config):
            current.setdefault(e.block, []).append(e.full)
            tokens, steps = tokens + len(e.unmasked), steps + 1
        blocks += current.values()
    return blocks, tokens / steps
