"""The GPU check: the decoder's passes at real size against the hardware's limits, today's path against the
fused one, and the app, in one call.

    python scripts/gpu_check.py --commit <hash> --out "$OUT"  # on the GPU machine: 5-7 minutes on an H100
    python scripts/gpu_check.py --dry-run --out /tmp/x         # the same code on the CPU, tiny shapes, 1-2 minutes
    python scripts/gpu_check.py --app-only --out "$OUT"        # only the app's part, ~3 minutes

The GPU machine's image has torch but not gradio, and its copy of the working tree may have no git
history (hence --commit): run scripts/gpu_wheels.sh here first, carry .whl, and make the device call
(timeout 480 s)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
    python3 scripts/gpu_check.py --commit "$(the hash of HEAD here)" --out "$OUT"

Nothing can be downloaded there, so the 8B-class models are built on the GPU from the exact configs
of LLaDA-8B-Instruct and Dream-v0-Instruct-7B with random bf16 weights. Random weights make entropy
meaningless, so EntropyCache's full/partial decisions are replayed from the schedule the embedded
model produces on held-out problems, one token per step and with threshold 0.9 (its unmask counts
replayed as steps per block). The card's dense bf16 peak comes from PEAKS (by its name; a card not
there is said to be unknown), its bandwidth from a device-to-device copy. For each model shape:
1. attention alone, as the model calls it (full and partial): which backend torch picks by itself,
   and each backend's time alone (torch.nn.attention.sdpa_kernel);
2. one pass at prompt + gen of 1000 + 256, 1000 + 512, 256 + 256 and a chat-sized 40 + 128, full and
   partial (block 32 + k rows): today's path (fusion off) eager and replayed from a CUDA graph, and
   the fused path (core/fusion.py) graphed: the full pass in TFLOPS and share of the peak, the partial
   one in GB/s of weights read and over the floor of reading them once at the copy bandwidth;
3. the fused graphed pass's time by rows computed, 8 to every row, at 1000 + 256;
4. end to end, graphed, at every shape, one token per step (its first MEASURED_BLOCKS blocks: a step
   costs the same in every block) and with threshold 0.9 (whole decodes): `none` and EntropyCache on
   today's path and on the fused one, and Fast-dLLM's dual cache on the fused one: tokens/s, speedups
   and the schedule's ceiling, decision share, peak memory;
5. that each fused graphed decode equals its own eager run (the same passes and kernels without
   graphs) token for token, and how often it agrees with today's path (compiled kernels sum bf16 in
   another order), over the whole response at 1000 + 256, four tokens a step;
6. the host syncs of a fused graphed step (torch.cuda.set_sync_debug_mode);
then the embedded model's bench on this device (graphed, its default kernels), and the app: app.py
serving a random model of LLaDA's full shape in its file layout through its --model flag (with a
byte-level tokenizer trained on the app's prompts, so that its long examples read), raced through
gradio_client on the graphed path: the long passage example at gen 256 (tau 12: only block starts
refresh, as the offline schedules), a chat-sized prompt at gen 128, a cancelled race and one after
it; then the long race's decode offline at its very prompt ids, the figure its banner must be within
15% of. It writes gpu_check.json and gpu_check.md under --out (with the commit and the command) and
prints the table with its targets checked. Its time on an H100 is an estimate until it runs
(the last run's parts, plus what is new): about 1.5 minutes a model shape (compiling the fused parts,
20-60 s, included), the schedules and the embedded bench about 1 minute, the app 2.5-3.5 (16 GB
written and loaded): 6.5-9 minutes in all. Within one device call of at most 8 minutes, run the
passes with --skip-app and the app in a second call with --app-only.

Then, in a second call if at least 4 minutes of device time are left, the app under load on that
machine's 16 dedicated cores (the embedded model decodes on the CPU there too):
    (the same install and export) && python3 scripts/load_test.py --short --no-app 8 \\
        --visitors 1,2,4,8,1 --races 3 --max-seconds 150 | tee "$OUT/load.txt"
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import ModelConfig  # noqa: E402
from core.decoder import DecodeConfig, decode  # noqa: E402
from core.device import sync  # noqa: E402
from core.families import FAMILIES  # noqa: E402
from core.fusion import fusion_state, set_fusion  # noqa: E402
from core.loading import chat_prompt_ids, load_model, part_shapes  # noqa: E402
from core.model import DiffusionTransformer  # noqa: E402
from core.passes import (  # noqa: E402
    ROW_BUCKETS,
    bucket,
    capture_off,
    error_line,
    idle_workspaces,
    passes_for,
    release_graphs,
)
from core.policies import TABLE_ORDER, make_policy  # noqa: E402
from core.policies.entropy import EntropyCache  # noqa: E402
from evaluation.bench import Contender, bench_progress, bench_rows  # noqa: E402
from evaluation.forward_cost import copy_bandwidth, forward_costs, pass_flops, weight_bytes  # noqa: E402
from evaluation.tasks import held_out  # noqa: E402
from evaluation.tasks.word_problems import make_split  # noqa: E402

# The exact shapes of the two checkpoints (their config.json), and tiny stand-ins for the dry run.
SHAPES = {
    "LLaDA-8B-Instruct": dict(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_dim=12288,
                              rope_theta=500000.0, mask_token_id=126336, max_seq_len=4096, family="llada"),
    "Dream-v0-Instruct-7B": dict(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_dim=18944,
                                 rope_theta=1000000.0, mask_token_id=151666, qkv_bias=True, logit_shift=1,
                                 max_seq_len=32768, family="dream"),
}
TINY = dict(vocab_size=512, dim=64, n_layers=2, ffn_dim=128, mask_token_id=500)
LENGTHS = [(1000, 256), (1000, 512), (256, 256), (40, 128)]  # (prompt, gen)
TINY_LENGTHS = [(40, 32), (8, 32)]  # two shapes are enough to run every line
BLOCK, K, TAU, THRESHOLD = 32, 2, 0.5, 0.9
MEASURED_BLOCKS = 1
REPEATS = 5  # timed calls of a pass, after three warm-up calls (graphed replays vary by ~1%)
# Dense bf16 tensor peaks (TFLOPS, FP32 accumulate, no sparsity, boost clock; NVIDIA's datasheets) and the
# whole card's SM count, matched in order against torch.cuda.get_device_name(); a partition (a MIG slice,
# ZeroGPU's half card) is given the share of SMs it has. None: the card is known, its peak is not here.
PEAKS = (("H100 PCIe", 756.0, 114), ("H100 NVL", 835.5, 132), ("H100", 989.4, 132), ("H200 NVL", 835.5, 132),
         ("H200", 989.4, 132), ("A100", 312.0, 108), ("RTX PRO 6000 Blackwell Max-Q", None, 188),
         ("RTX PRO 6000 Blackwell", 503.8, 188))
LEVEL = 0.98  # "level with dual": within 2%, what repeated graphed timings of one decode spread by (98-102% of
# the schedule's ceiling in the H100 report)
MODES = ("one token per step", "threshold 0.9")


def build(shape: dict, device: torch.device, dry: bool, n_layers: int | None = None) -> DiffusionTransformer:
    """A model of this shape with random weights, built on the device in bf16 (float32 on CPU)."""
    tiny = dict(TINY, n_heads=4, n_kv_heads=2 if shape["family"] == "dream" else 4)
    cfg = ModelConfig(**{**shape, **tiny} if dry else {**shape, "n_layers": n_layers or shape["n_layers"]})
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = DiffusionTransformer(cfg).eval()
        finally:
            torch.set_default_dtype(previous)
    return model


def seconds_per_call(run, device: torch.device, repeats: int) -> float:
    """Mean seconds of run() over `repeats` calls after three warm-up calls, the device synchronised."""
    for _ in range(3):
        run()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        run()
    sync(device)
    return (time.perf_counter() - t0) / repeats


def graphed_costs(model, length: int, row_counts: list[int], repeats: int) -> dict[int, float]:
    """Seconds of a pass computing each of `row_counts` rows (the sequence's last ones; >= length: the
    full pass), reading the last block's logits, replayed from its CUDA graph (on a CPU: the same
    padded pass, eagerly)."""
    needed = list(range(length - BLOCK, length))
    out = {}
    with torch.no_grad(), passes_for(model, length, BLOCK, "on") as ws:
        ws.start(torch.randint(0, model.config.mask_token_id, (length - BLOCK,)).tolist())
        for n in row_counts:
            rows = None if n >= length else list(range(length - n, length))
            out[n] = seconds_per_call(lambda rows=rows: ws.run(model, rows, needed), ws.device, repeats)
    return out


def forward_part(model, lengths, bytes_per_s: float, repeats: int, peak_tflops: float | None) -> list[dict]:
    """Today's passes (fusion off): full and partial (block + k rows) at each length, eager and graphed,
    beside the weight-read floor. `fused_part` adds the fused ones to these rows."""
    set_fusion(model, "off")
    floor_s = weight_bytes(model) / bytes_per_s
    out = []
    for prompt, gen in lengths:
        length = prompt + gen
        eager = forward_costs(model, length, [length, BLOCK + K], repeats=repeats)
        graphed = graphed_costs(model, length, [length, BLOCK + K], repeats)
        out.append(dict(prompt=prompt, gen=gen, floor_ms=floor_s * 1e3,
                        eager_full_ms=eager[length] * 1e3, eager_partial_ms=eager[BLOCK + K] * 1e3,
                        unfused_full_ms=graphed[length] * 1e3, unfused_partial_ms=graphed[BLOCK + K] * 1e3,
                        **pass_rates(model, length, graphed[length], graphed[BLOCK + K], bytes_per_s, peak_tflops,
                                     "unfused_")))
    release_graphs(model)
    return out


def fused_part(model, forward: list[dict], bytes_per_s: float, repeats: int, peak_tflops: float | None,
               backend: str) -> float:
    """The fused passes (fusion on, compiled by torch.compile's `backend`), graphed, added to `forward`'s
    rows; returns the seconds the first full and partial passes took, compiling."""
    set_fusion(model, "on", backend=backend)
    first = forward[0]["prompt"] + forward[0]["gen"]
    t0 = time.perf_counter()
    forward_costs(model, first, [first, BLOCK + K, BLOCK + K + 1], repeats=1)  # compiled: static, then dynamic
    compile_s = time.perf_counter() - t0
    for r in forward:
        length = r["prompt"] + r["gen"]
        graphed = graphed_costs(model, length, [length, BLOCK + K], repeats)
        r.update(fused_full_ms=graphed[length] * 1e3, fused_partial_ms=graphed[BLOCK + K] * 1e3,
                 **pass_rates(model, length, graphed[length], graphed[BLOCK + K], bytes_per_s, peak_tflops, "fused_"))
    release_graphs(model)
    return compile_s


def pass_rates(model, length: int, full_s: float, partial_s: float, bytes_per_s: float, peak_tflops: float | None,
               prefix: str) -> dict:
    """What a full pass achieves in TFLOPS (and of the card's peak) and a partial one in GB/s of weights
    read (and over the floor of reading them at the copy bandwidth), with the partial / full ratio."""
    full_tflops = pass_flops(model.config, length, length, BLOCK) / full_s / 1e12
    weights = weight_bytes(model)
    return {f"{prefix}full_tflops": full_tflops,
            f"{prefix}full_of_peak": full_tflops / peak_tflops if peak_tflops else None,
            f"{prefix}partial_gb_s": weights / partial_s / 1e9,
            f"{prefix}partial_over_floor": partial_s / (weights / bytes_per_s),
            f"{prefix}partial_share": partial_s / full_s}


def rows_curve(model, length: int, bytes_per_s: float, repeats: int) -> list[dict]:
    """The graphed pass's time against the rows it computes, from 8 to the full pass (every bucket of
    core/passes.py on the way): where it leaves the weight floor and becomes compute-bound."""
    counts = [b for b in ROW_BUCKETS if b < length] + [length]
    costs = graphed_costs(model, length, counts, repeats)
    floor_s = weight_bytes(model) / bytes_per_s
    release_graphs(model)
    return [dict(rows=n, ms=s * 1e3, over_floor=s / floor_s,
                 tflops=pass_flops(model.config, n, length, BLOCK) / s / 1e12) for n, s in costs.items()]


def attention_backends(model, length: int, repeats: int) -> dict[str, dict]:
    """The attention of one layer as the model calls it (its layouts: queries a view of the fused q/k/v
    projection, keys and values the cache's), full (every row) and partial (48 rows, a bucket of block +
    k): which backend torch picks by itself, and the time of each backend alone ('refused' where it
    cannot run the call)."""
    cfg, device = model.config, model.embed.weight.device
    dtype, heads = model.embed.weight.dtype, cfg.n_heads + 2 * cfg.n_kv_heads
    cache = torch.randn(2, 1, cfg.n_kv_heads, length, cfg.head_dim, device=device, dtype=dtype)
    out = {}
    for name, rows in (("full", length), ("partial", bucket(BLOCK + K, length))):
        q = torch.randn(1, rows, heads, cfg.head_dim, device=device, dtype=dtype)[:, :, :cfg.n_heads].transpose(1, 2)
        call = partial(F.scaled_dot_product_attention, q, cache[0], cache[1], enable_gqa=cfg.n_heads != cfg.n_kv_heads)
        with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            call()
        ran = sorted({e.name for e in prof.events() if e.name.startswith("aten::_scaled_dot_product")})
        times = {}
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH):
            try:
                with torch.no_grad(), sdpa_kernel(backend):
                    times[backend.name.lower()] = seconds_per_call(call, device, repeats) * 1e3
            except RuntimeError as e:
                times[backend.name.lower()] = f"refused: {error_line(e)[:120]}"
        with torch.no_grad():
            default_ms = seconds_per_call(call, device, repeats) * 1e3
        out[name] = dict(rows=rows, default=ran, default_ms=default_ms, alone_ms=times)
    return out


def card_peak(name: str, sms: int) -> dict:
    """The card's dense bf16 peak from PEAKS, scaled to the share of its SMs this device has (a MIG slice,
    ZeroGPU's half card); None for a card not in the table."""
    for key, tflops, full_sms in PEAKS:
        if key.lower() in name.lower():
            if tflops is None:
                return dict(card=key, peak_tflops=None, note=f"{key}: no datasheet peak in the table")
            share = min(1.0, sms / full_sms)
            note = "" if share == 1 else f"{sms} of its {full_sms} SMs: {share:.0%} of {tflops:g} TFLOPS"
            return dict(card=key, peak_tflops=tflops * share, note=note)
    return dict(card=None, peak_tflops=None, note=f"unknown card ({name}): no peak to compare with")


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


def prompt_ids(model, prompt: int) -> list[int]:
    """The random prompt of this length, the same for every path and policy."""
    generator = torch.Generator().manual_seed(prompt)
    return torch.randint(0, model.config.mask_token_id, (prompt,), generator=generator).tolist()


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


def syncs_per_step(model, length: tuple[int, int], blocks) -> dict | None:
    """Host syncs torch reports in graphed EntropyCache steps, once their graphs are captured (None on a CPU)."""
    if not torch.cuda.is_available() or model.embed.weight.device.type != "cuda":
        return None
    prompt, gen = length
    ids = torch.randint(0, model.config.mask_token_id, (prompt,)).tolist()
    config = DecodeConfig(gen_len=gen, block_len=BLOCK, stop_at_eos=False, graphs="on")
    timed_decode(model, ids, ReplayedEntropy(blocks), config, BLOCK)  # captures what the next decode needs
    steps = decode(model, ids, ReplayedEntropy(blocks), config)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            n = sum(1 for _ in itertools.islice(steps, BLOCK))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    steps.close()
    kinds: dict[str, int] = {}
    for w in seen:
        key = str(w.message).split("\n")[0][:120]
        kinds[key] = kinds.get(key, 0) + 1
    release_graphs(model)
    return dict(steps=n, per_step=len(seen) / n, kinds=kinds)


def embedded_bench(device: torch.device, n: int, gen_len: int, graphs: str, warmup: int) -> list[dict]:
    """The embedded model's interleaved bench, every policy, on this device."""
    model, tokenizer = load_model(None, device=device)
    contenders = [Contender(p, {}) for p in TABLE_ORDER]
    config = DecodeConfig(gen_len=gen_len, block_len=BLOCK, graphs=graphs)
    return bench_rows(bench_progress(model, tokenizer, held_out("words", n), contenders, config, warmup), bar=False)


def write_llada_layout(model: DiffusionTransformer, folder: Path, tokenizer) -> None:
    """`model`'s weights in LLaDA-8B-Instruct's file layout (sharded safetensors, its config keys),
    with the embedded tokenizer: what the app's --model flag is given."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    params = dict(model.named_parameters())
    weight_map, shard, size, n = {}, {}, 0, 0

    def flush() -> None:
        nonlocal shard, size, n
        if shard:
            n += 1
            save_file(shard, folder / f"model-{n:05d}.safetensors", metadata={"format": "pt"})
            weight_map.update({name: f"model-{n:05d}.safetensors" for name in shard})
            shard, size = {}, 0

    for ours, parts in FAMILIES["llada"].sources(cfg).items():
        value = params[ours].detach()
        shapes = part_shapes(ours, len(parts), value.shape, cfg)
        for part, piece in zip(parts, value.split([s[0] for s in shapes])):
            shard[part] = piece.to("cpu", torch.bfloat16).contiguous()
            size += shard[part].numel() * 2
            if size > 4 * 2**30:
                flush()
    flush()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = {"model_type": "llada", "d_model": cfg.dim, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
              "n_kv_heads": cfg.n_kv_heads, "mlp_hidden_size": cfg.ffn_dim, "embedding_size": cfg.vocab_size,
              "vocab_size": cfg.vocab_size, "rope_theta": cfg.rope_theta, "max_sequence_length": cfg.max_seq_len,
              "mask_token_id": cfg.mask_token_id, "eos_token_id": tokenizer.eos_token_id, "block_type": "llama",
              "layer_norm_type": "rms", "activation_type": "silu", "rope": True, "weight_tying": False}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tokenizer.save_pretrained(folder)


def prose_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer trained here on the app's own prompts, in LLaDA's tokenizer layout (its
    special tokens and chat template): it reads any text, and its long examples take about as many
    tokens as with a real 126k-token vocabulary. (LLaDA's own tokenizer cannot be downloaded here.)"""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from app.serving.examples import CHAT_EXAMPLES
    from app.serving.long_prompts import LONG_PROMPTS

    specials = ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator([p.text for p in LONG_PROMPTS] + list(CHAT_EXAMPLES), trainer)
    template = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                "{{ m['content'] }}<|eot_id|>{% endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n")
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|startoftext|>", eos_token="<|eot_id|>",
                                   pad_token="<|endoftext|>", chat_template=template)


def app_race_args(label: str, prompt: str, gen_len: int) -> dict:
    """A race of no cache against EntropyCache at tau 12 nats, above any entropy a random 126k-token model
    gives (ln 126464 = 11.7): with random weights entropy means nothing, so only block starts refresh,
    the schedule the offline figures replay."""
    from app.controls.declared import VANILLA

    return dict(prompt=prompt, model=label, policy=VANILLA, tau=12.0, k=K, gen_len=gen_len, block_len=BLOCK, steps=0,
                threshold=0, temperature=0, seed=0)


def app_check(folder: Path, dry: bool) -> dict:
    """app.py with --model folder, raced through gradio_client: the long passage (at gen 256), a chat-sized
    prompt (at gen 128), a cancelled race and one after it. Each finished race's banner speedup, its
    time panel in words, and the long race's prompt ids (for the offline figure at its length)."""
    try:
        from gradio_client import Client

        from app.client import named
        from app.serving.examples import CHAT_EXAMPLES
        from app.serving.long_prompts import LONG_PROMPTS
        from app.serving.registry import build_registry
        from scripts.ports import free_port
    except ImportError as e:
        return {"ok": False, "skipped": f"gradio_client is not installed here ({e}); carry the app's wheels"}
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--model", str(folder)],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}/", time.time() + 600
        while "running at" not in Path(log.name).read_text():
            if server.poll() is not None or time.time() > deadline:
                return {"ok": False, "error": "the app did not start", "log": Path(log.name).read_text()[-3000:]}
            time.sleep(1)
        client = Client(url, verbose=False)
        label = build_registry([str(folder)]).labels[-1]  # the label the app gives the folder
        races = {}
        for name, prompt, gen in (("long", LONG_PROMPTS[1].text, 32 if dry else 256),
                                  ("chat", CHAT_EXAMPLES[0], 32 if dry else 128)):
            t0 = time.time()
            out = named(client.predict(**app_race_args(label, prompt, gen), api_name="/run"))
            trace = json.loads(Path(out["trace"]).read_text())
            races[name] = dict(wall_s=time.time() - t0, gen=gen, prompt_ids=trace["prompt_ids"],
                               speedup=trace["speedup"], banner=plain(out["status"])[:600],
                               time_panel=plain(out["time"])[:2000], finished=finished(out["status"]))
        long = client.submit(**app_race_args(label, LONG_PROMPTS[1].text, 64 if dry else 512), api_name="/run")
        time.sleep(2 if not dry else 0.5)
        long.cancel()
        again = named(client.predict(**app_race_args(label, CHAT_EXAMPLES[0], 32 if dry else 128), api_name="/run"))
        return {"ok": all(r["finished"] for r in races.values()) and finished(again["status"]), "races": races,
                "after_cancel_banner": plain(again["status"])[:400]}
    except Exception as e:  # noqa: BLE001 -- the check reports what broke
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "log": Path(log.name).read_text()[-3000:]}
    finally:
        server.terminate()
        server.wait(timeout=30)


def app_summary(app: dict) -> dict:
    """The app's part of the report as printed: without the server's log and the prompts' ids."""
    races = {name: {k: v for k, v in race.items() if k != "prompt_ids"} for name, race in app.get("races", {}).items()}
    return {k: v for k, v in app.items() if k != "log"} | ({"races": races} if races else {})


def plain(html_text: str) -> str:
    """An HTML output as the words a visitor reads."""
    import html
    import re

    return " ".join(html.unescape(re.sub("<[^>]+>", " ", html_text)).split())


def offline_race(device: torch.device, dry: bool, prompt_ids: list[int], gen_len: int) -> dict:
    """The app's long race decoded here without the app, at its prompt ids and settings, both lanes
    graphed with the app's default kernels (on the CPU: the same padded passes, eagerly): none against
    EntropyCache at tau 12, each decoded once to capture its graphs and then timed, interleaved."""
    model = build(SHAPES["LLaDA-8B-Instruct"], device, dry)
    set_fusion(model, "auto")  # as the app loads it (core/fusion.py)
    config = DecodeConfig(gen_len=gen_len, block_len=BLOCK, graphs="on")
    policies = {"none": lambda: make_policy("none"), "entropy": lambda: make_policy("entropy", tau=12.0, k=K)}
    seconds = {}
    for timed in (False, True):
        for name, policy in policies.items():
            events = list(decode(model, prompt_ids, policy(), config))
            if timed:
                seconds[name] = sum(e.compute_s for e in events)
    del model
    free()
    return dict(none_s=seconds["none"], entropy_s=seconds["entropy"], speedup=seconds["none"] / seconds["entropy"])


def finished(banner: str) -> bool:
    """A race's last status line says it finished with a speedup (not a refusal, not an error)."""
    return "finished" in banner and "speedup" in banner and "ec-refused" not in banner


def targets(report: dict) -> list[str]:
    """The targets, each with what was measured and whether it is met."""
    lines = []
    for name, m in report["models"].items():
        one, par = m["end_to_end"][MODES[0]], m["end_to_end"][MODES[1]]
        main, pass_main = one[0], m["forward"][0]
        shape = f"{main['prompt']} + {main['gen']}"
        of_peak = pass_main["fused_full_of_peak"]
        checks = [
            (f"graphed full pass at {shape} >= 65% of the card's dense bf16 peak",
             of_peak is not None and of_peak >= 0.65, f"{pass_main['fused_full_tflops']:.0f} TFLOPS, "
             + (f"{of_peak:.0%}" if of_peak is not None else report["peak"]["note"])),
            (f"graphed partial pass at {shape} <= 1.25x the weight-read floor",
             pass_main["fused_partial_over_floor"] <= 1.25,
             f"{pass_main['fused_partial_over_floor']:.2f}x (max over shapes "
             f"{max(r['fused_partial_over_floor'] for r in m['forward']):.2f}x)"),
            (f"tokens/s of the exact decoder and EntropyCache at {shape} >= 1.4x today's (fused over unfused)",
             min(main["gain_none"], main["gain_entropy"]) >= 1.4,
             f"{main['gain_none']:.2f}x / {main['gain_entropy']:.2f}x"),
            (f"EntropyCache over graphed none at {shape}, one token per step >= 4x", main["speedup_fused"] >= 4,
             f"{main['speedup_fused']:.2f}x"),
            ("... never below 1.0x at any shape (both modes)", min(r["speedup_fused"] for r in one + par) >= 1,
             f"min {min(r['speedup_fused'] for r in one + par):.2f}x"),
            (f"EntropyCache level with graphed dual at every shape (>= {LEVEL}x, both modes)",
             min(r["vs_dual"] for r in one + par) >= LEVEL, f"min {min(r['vs_dual'] for r in one + par):.2f}x"),
            ("each fused graphed decode equals its own eager run token for token",
             all(v["fused_equals_own_eager"] for v in m["equality"].values()), ""),
            ("... and agrees with today's unfused path on >= 99% of positions",
             min(v["agreement_with_unfused"] for v in m["equality"].values()) >= 0.99,
             f"min {min(v['agreement_with_unfused'] for v in m['equality'].values()):.3f}"),
            ("every pointwise part compiled (none fell back to eager)", m["fusion"] == "compiled", m["fusion"]),
        ]
        lines += [f"- {name}: {what}: {'met' if ok else 'NOT met'} {value}".rstrip() for what, ok, value in checks]
    if "app" in report and report["app"].get("ok") is not None:
        app = report["app"]
        met = "met" if app["ok"] else "NOT met"
        lines.append(f"- the app: races finish, and one after a cancelled race: {met}")
        if "offline" in app:
            shown, offline = app["races"]["long"]["speedup"], app["offline"]["speedup"]
            ok = abs(shown / offline - 1) <= 0.15
            lines.append(f"- the app's race at LLaDA's shape, {len(app['races']['long']['prompt_ids'])} + "
                         f"{app['races']['long']['gen']}: banner within 15% of the same decode offline: "
                         f"{'met' if ok else 'NOT met'} {shown:.2f}x against {offline:.2f}x "
                         f"(chat-sized prompt: {app['races']['chat']['speedup']:.2f}x)")
    return lines


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    head = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return head + ["| " + " | ".join(r) + " |" for r in rows]


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def markdown(report: dict) -> str:
    peak = report["peak"]
    lines = [f"GPU check, {report['date']}, {report['device']}, torch {report['torch']}, commit {report['commit']}",
             f"Command: {report['command']}",
             f"Copy bandwidth {report['bandwidth_gb_s']:.0f} GB/s; dense bf16 peak "
             + (f"{peak['peak_tflops']:.0f} TFLOPS ({peak['card']}{'; ' + peak['note'] if peak['note'] else ''})"
                if peak["peak_tflops"] else peak["note"]), ""]
    for name, m in report["models"].items():
        floor = m["forward"][0]["floor_ms"]
        lines += [f"## {name} shape, random weights ({m['weight_gb']:.1f} GB read per pass, floor {floor:.2f} ms)", "",
                  f"Pointwise parts: {m['fusion']} (compiling took {m['compile_s']:.1f} s).", ""]
        lines += table(["prompt + gen", "full ms eager / graphed / fused", "full TFLOPS (of peak) graphed / fused",
                        "partial ms eager / graphed / fused", "partial GB/s (x floor) graphed / fused",
                        "partial / full fused"], [
            [f"{r['prompt']} + {r['gen']}",
             f"{r['eager_full_ms']:.2f} / {r['unfused_full_ms']:.2f} / {r['fused_full_ms']:.2f}",
             f"{r['unfused_full_tflops']:.0f} ({percent(r['unfused_full_of_peak'])}) / "
             f"{r['fused_full_tflops']:.0f} ({percent(r['fused_full_of_peak'])})",
             f"{r['eager_partial_ms']:.2f} / {r['unfused_partial_ms']:.2f} / {r['fused_partial_ms']:.2f}",
             f"{r['unfused_partial_gb_s']:.0f} ({r['unfused_partial_over_floor']:.2f}x) / "
             f"{r['fused_partial_gb_s']:.0f} ({r['fused_partial_over_floor']:.2f}x)",
             f"{r['fused_partial_share']:.3f}"] for r in m["forward"]])
        curve = m["rows_curve"]
        lines += ["", f"A fused graphed pass by rows computed at {curve[-1]['rows']} positions:", ""]
        lines += table(["rows", *(str(c["rows"]) for c in curve)],
                       [["ms", *(f"{c['ms']:.2f}" for c in curve)],
                        ["x floor", *(f"{c['over_floor']:.2f}" for c in curve)],
                        ["TFLOPS", *(f"{c['tflops']:.0f}" for c in curve)]])
        lines += ["", "Attention alone, as the model calls it (ms; the backend torch picks by itself first; why a "
                  "backend refused is in the JSON):", ""]
        backends = list(next(iter(m["attention"].values()))["alone_ms"])
        lines += table(["pass", "rows", "torch picks", "ms", *backends], [
            [kind, str(a["rows"]), ", ".join(a["default"]).replace("aten::_scaled_dot_product_", ""),
             f"{a['default_ms']:.3f}",
             *(f"{v:.3f}" if isinstance(v, float) else "refused" for v in a["alone_ms"].values())]
            for kind, a in m["attention"].items()])
        for mode, rows in m["end_to_end"].items():
            lines += ["", f"End to end, {mode}, graphed (tokens/s; EntropyCache against none, against dual, "
                      "and the fused path against today's unfused one):", ""]
            extra = ["vs one token per step"] if mode != MODES[0] else []
            lines += table(["prompt + gen", "steps", "tok/s none / entropy / dual fused", "tok/s none / entropy today",
                            "speedup fused (today)", "of ceiling", "vs dual", "fused / today none, entropy",
                            "full steps", "decision", "peak GiB", *extra], [
                [f"{r['prompt']} + {r['gen']}", str(r["steps"]),
                 " / ".join(f"{r[f'{p}_fused']['tokens_per_s']:.1f}" for p in ("none", "entropy", "dual")),
                 " / ".join(f"{r[f'{p}_unfused']['tokens_per_s']:.1f}" for p in ("none", "entropy")),
                 f"{r['speedup_fused']:.2f}x ({r['speedup_unfused']:.2f}x)", f"{r['of_ceiling_fused']:.0%}",
                 f"{r['vs_dual']:.2f}x", f"{r['gain_none']:.2f}x, {r['gain_entropy']:.2f}x",
                 f"{r['entropy_fused']['full_steps']:.3f}", f"{r['entropy_fused']['decision']:.2%}",
                 f"{r['entropy_fused']['peak_gib'] or 0:.1f}",
                 *([f"{r['vs_vanilla_fused']:.1f}x"] if extra else [])] for r in rows])
        lines += ["", f"Token equality: {json.dumps(m['equality'])}", f"Host syncs per graphed step: "
                  f"{json.dumps(m['syncs'])}", ""]
    lines += ["## The embedded model's bench on this device (speedup over none, graphed)", ""]
    lines += table(["policy", "acc", "agree", "speedup", "decision"], [
        [r["label"], f"{r['accuracy']:.3f}", f"{r['agreement']:.3f}", f"{r['speedup']:.2f}x",
         f"{r['decision_overhead']:.2%}"] for r in report["embedded_bench"]])
    lines += ["", f"## The app: {json.dumps(app_summary(report['app']))}", "", "## Targets", "", *targets(report)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu-check"))
    ap.add_argument("--dry-run", action="store_true", help="the same code on the CPU with tiny shapes")
    ap.add_argument("--skip-app", action="store_true")
    ap.add_argument("--app-only", action="store_true", help="only the app's race (a rerun of that part)")
    ap.add_argument("--commit", default=None, help="the commit checked, for the report (default: git's HEAD here)")
    args = ap.parse_args(argv)
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("error: no CUDA GPU here; use --dry-run for the CPU rehearsal", file=sys.stderr)
        return 2
    device = torch.device("cpu" if dry else "cuda")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lengths, repeats = (TINY_LENGTHS, 2) if dry else (LENGTHS, REPEATS)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0
    report = dict(date=time.strftime("%Y-%m-%d %H:%M"), torch=torch.__version__, python=platform.python_version(),
                  device=name, peak=card_peak(name, sms), commit=args.commit or head_commit(),
                  command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), models={})

    embedded, tokenizer = load_model(None, device=device, fusion="off")  # the schedules need no speed
    if args.app_only:
        del embedded
        report["app"] = app_part(device, dry)
        save(out, report)
        print(f"## The app: {json.dumps(app_summary(report['app']))}")
        print("\n".join(targets(report)))
        return 0 if report["app"]["ok"] else 1
    problems = 2 if dry else 20
    schedules = {MODES[0]: schedule(embedded, tokenizer, None, problems),
                 MODES[1]: schedule(embedded, tokenizer, THRESHOLD, problems)}
    report["schedules"] = {mode: dict(full_steps=sum(map(sum, b)) / sum(map(len, b)), tokens_per_step=per)
                           for mode, (b, per) in schedules.items()}
    report["bandwidth_gb_s"] = (bytes_per_s := copy_bandwidth(str(device), 2**20 if dry else 2**31)) / 1e9
    peak, backend = report["peak"]["peak_tflops"], "eager" if dry else "inductor"
    for name, shape in SHAPES.items():
        t0 = time.time()
        model = build(shape, device, dry)
        blocks, main_length = schedules[MODES[0]][0], lengths[0]
        m = report["models"][name] = dict(weight_gb=weight_bytes(model) / 1e9)
        m["attention"] = attention_backends(model, sum(main_length), repeats)
        m["forward"] = forward_part(model, lengths, bytes_per_s, repeats, peak)  # today's path: fusion off
        m["end_to_end"] = end_to_end(model, lengths, schedules, "unfused")
        unfused = equality_tokens(model, main_length, blocks)
        save(out, report)
        m["compile_s"] = fused_part(model, m["forward"], bytes_per_s, repeats, peak, backend)  # fusion on from here
        m["rows_curve"] = rows_curve(model, sum(main_length), bytes_per_s, repeats)
        end_to_end(model, lengths, schedules, "fused", m["end_to_end"])
        summarize(m["end_to_end"], m["forward"])
        m["equality"] = equality(model, main_length, blocks, unfused)
        m["syncs"] = syncs_per_step(model, main_length, blocks)
        m["fusion"] = fusion_state(model)
        m["seconds"] = time.time() - t0
        save(out, report)
        print(f"{name}: done in {m['seconds']:.0f} s", flush=True)
        del model
        free()
    n, gen_len, warmup = (1, BLOCK, 0) if dry else (4, 2 * BLOCK, 1)
    report["embedded_bench"] = embedded_bench(device, n, gen_len, "on", warmup)
    save(out, report)
    if args.skip_app:
        report["app"] = {"ok": None, "skipped": "--skip-app"}
    else:
        report["app"] = app_part(device, dry)
    save(out, report)
    text = markdown(report)
    (out / "gpu_check.md").write_text(text)
    print(text)
    return 0


def head_commit() -> str:
    """git's HEAD where the check runs, if it is a git checkout (a copied working tree is not)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (pass --commit)"
    return done.stdout.strip() if done.returncode == 0 else "unknown (pass --commit)"


def app_part(device: torch.device, dry: bool) -> dict:
    """app_check on a random model of LLaDA's full shape in its file layout (16 GB, written to a temporary
    folder), with a tokenizer that reads the long examples; then the long race offline, for the figure
    its banner is held against."""
    with tempfile.TemporaryDirectory() as folder:
        model = build(SHAPES["LLaDA-8B-Instruct"], device, dry)
        write_llada_layout(model, Path(folder) / "llada-shaped", prose_tokenizer(300 if dry else 4096))
        del model
        free()
        result = app_check(Path(folder) / "llada-shaped", dry)
    if result["ok"]:
        long = result["races"]["long"]
        result["offline"] = offline_race(device, dry, long["prompt_ids"], long["gen"])
    return result


def save(out: Path, report: dict) -> None:
    """The report so far, so that a run stopped at its time limit still returns what it measured."""
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"saved at {time.strftime('%H:%M:%S')}: {', '.join(report['models'])}", flush=True)


def free() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
