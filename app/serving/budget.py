"""How much work one request may ask for, declared once: a race's or a drift run's positions, a
sweep's decodes. A request over its budget is refused before anything decodes, the refusal naming
the limit and what the request asked.

A decode's work grows with the positions each of its steps computes (the prompt and the response) times
its steps (one token per step: the gen length; else `steps`), once per decode (a race's lanes). That
product is what a request's time on the device follows. The CPU budget leaves room for every example a
model offers at the paper's settings (the paper's comparison on the embedded model's long example asks
for 495,360) and refuses the largest race the controls allow (gen 512 after a long prompt, which held
the CPU for minutes). A GPU decodes an 8B model about as fast as a CPU does the embedded one, so its
budget is larger by GPU_FACTOR (the long LLaDA and Dream examples fit it before their tokenizer is
loaded, counted at a token a byte). A sweep's work is counted in decodes (the exact decoder and every
tau x k setting, for every prompt), and their work as a race's is counted. No gradio here.
"""

from __future__ import annotations

from typing import NamedTuple

from core.config import DecodeConfig

CPU_POSITIONS = 600_000  # a race's or a drift run's positions x steps, summed over its decodes, on the CPU
CPU_SWEEP_DECODES = 200  # a sweep's decodes on the CPU (the default sweep: 36)
# and their positions x steps, summed: 200 decodes of a short prompt at the embedded model's gen 256
CPU_SWEEP_POSITIONS = 16_000_000
GPU_FACTOR = 10  # on a GPU, both budgets times this


class Decode(NamedTuple):
    """One decode of a request: its positions (prompt + response) and the most steps it takes."""
    positions: int
    steps: int

    @classmethod
    def of(cls, prompt_len: int, config: DecodeConfig) -> Decode:
        return cls(prompt_len + config.gen_len, config.max_steps)


def position_budget(device: str) -> int:
    return CPU_POSITIONS * (GPU_FACTOR if device == "cuda" else 1)


def sweep_budget(device: str) -> int:
    return CPU_SWEEP_DECODES * (GPU_FACTOR if device == "cuda" else 1)


def check_decodes(decodes: list[Decode], device: str) -> int:
    """The work of `decodes` (positions x steps, summed), or a ValueError naming the budget and the work asked."""
    work = sum(d.positions * d.steps for d in decodes)
    budget = position_budget(device)
    if work > budget:
        shape = " + ".join(f"{d.positions} positions x {d.steps} steps" for d in decodes)
        raise ValueError(f"This run asks for {work:,} positions of work ({shape}); a run on the {device.upper()} may "
                         f"ask for at most {budget:,}. Shorten the prompt or the gen length, or decode fewer steps.")
    return work


def check_sweep(prompts: list[Decode], settings: int, device: str) -> int:
    """A sweep's decodes (each of `prompts` at `settings` settings), or a ValueError naming the budget it is
    over and what it asked: its decodes, or their work (long prompts at a long gen length)."""
    decodes, budget = len(prompts) * settings, sweep_budget(device)
    if decodes > budget:
        raise ValueError(f"This sweep asks for {decodes} decodes; a sweep on the {device.upper()} may ask for at most "
                         f"{budget}. List fewer tau or k values, or fewer prompts.")
    work = settings * sum(d.positions * d.steps for d in prompts)
    most = CPU_SWEEP_POSITIONS * (GPU_FACTOR if device == "cuda" else 1)
    if work > most:
        longest = max(prompts, key=lambda d: d.positions)
        raise ValueError(f"This sweep asks for {work:,} positions of work ({decodes} decodes, the longest "
                         f"{longest.positions} positions x {longest.steps} steps); a sweep on the {device.upper()} may "
                         f"ask for at most {most:,}. Shorten the prompts or the gen length, or list fewer values.")
    return decodes
