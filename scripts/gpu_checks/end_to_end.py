"""Check 4: graphed decodes end to end at every shape, one token per step and with threshold 0.9: none
and replayed EntropyCache on today's path and the fused one, dual on the fused one; and the ratios."""

from __future__ import annotations

import itertools

import torch

from core.config import DecodeConfig
from core.decoder import decode
from core.passes import idle_workspaces, release_graphs
from core.policies import make_policy
from scripts.gpu_checks.replayed import ReplayedEntropy
from scripts.gpu_checks.shapes import BLOCK, MEASURED_BLOCKS, MODES, prompt_ids


def timed_decode(model, ids: list[int], policy, config: DecodeConfig, max_steps: int | None) -> dict:
    """One decode (its first max_steps steps), with what it cost; the generator is closed after."""
    device = model.embed.weight.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    steps = decode(model, ids, policy, config)
    events = list(itertools.islice(steps, max_steps))
    steps.close()
    t = events[-1].totals
    decoded = sum(len(e.unmasked) for e in events)
    return dict(compute_s=t.compute_s, steps=t.steps, decoded=decoded, s_per_token=t.compute_s / decoded,
                tokens_per_s=decoded / t.compute_s, full_steps=t.full_steps / t.steps,
                decision=t.decision_s / t.compute_s, capture_s=t.capture_s, tokens=events[-1].tokens,
                peak_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None)


def end_to_end(model, lengths, schedules: dict, path: str, out: dict[str, list[dict]] | None = None
               ) -> dict[str, list[dict]]:
    """Graphed decodes on the model's current path ('unfused': today's, fusion off; 'fused'), one
    random prompt per length, in both modes: none and replayed EntropyCache, and on the fused path
    Fast-dLLM's dual cache beside them. Each decode's costs go into `out`'s row of its length and mode
    as '<policy>_<path>'; `summarize` derives the ratios once both paths are in."""
    out = out or {mode: [dict(prompt=p, gen=g) for p, g in lengths] for mode in MODES}
    names = ("none", "entropy", "dual") if path == "fused" else ("none", "entropy")
    for i, (prompt, gen) in enumerate(lengths):
        ids = prompt_ids(model, prompt)
        for mode in MODES:
            blocks, per_step = schedules[mode]
            threshold = mode != MODES[0]
            steps = gen // BLOCK * max(1, min(BLOCK, round(BLOCK / per_step))) if threshold else None
            max_steps = None if threshold else MEASURED_BLOCKS * BLOCK
            row = out[mode][i]
            row["steps"] = steps or gen
            config = DecodeConfig(gen_len=gen, block_len=BLOCK, steps=steps, stop_at_eos=False, graphs="on")
            for name in names:
                policy = ReplayedEntropy(blocks) if name == "entropy" else make_policy(name)
                row[f"{name}_{path}"] = {k: v for k, v in timed_decode(model, ids, policy, config, max_steps).items()
                                         if k != "tokens"}
        out[MODES[0]][i][f"graphs_captured_{path}"] = sum(len(ws.graphs) for ws in idle_workspaces(model))
        release_graphs(model)
    return out


def summarize(e2e: dict[str, list[dict]], forward: list[dict]) -> None:
    """The ratios of each end-to-end row: EntropyCache against none (and the ceiling the schedule and the
    pass costs give) on each path, against dual, the fused path against today's, and with threshold
    0.9 against the one-token-per-step exact decoder."""
    def per_token(row: dict, key: str) -> float:
        return row[key]["s_per_token"]

    for rows in e2e.values():
        for row, cost in zip(rows, forward):
            for path in ("unfused", "fused"):
                f = row[f"entropy_{path}"]["full_steps"]
                row[f"speedup_{path}"] = per_token(row, f"none_{path}") / per_token(row, f"entropy_{path}")
                row[f"ceiling_{path}"] = 1 / (f + (1 - f) * cost[f"{path}_partial_share"])
                row[f"of_ceiling_{path}"] = row[f"speedup_{path}"] / row[f"ceiling_{path}"]
            row["vs_dual"] = per_token(row, "dual_fused") / per_token(row, "entropy_fused")
            for name in ("none", "entropy"):
                row[f"gain_{name}"] = per_token(row, f"{name}_unfused") / per_token(row, f"{name}_fused")
    for vanilla, parallel in zip(*e2e.values()):  # the paper's comparison: vs one token per step
        parallel["vs_vanilla_fused"] = per_token(vanilla, "none_fused") / per_token(parallel, "entropy_fused")
