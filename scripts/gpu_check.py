"""The GPU check: the real-size decoder and the app on one GPU, in one call (issue: GPU check).

    python scripts/gpu_check.py --out "$OUT"            # on the GPU machine, ~6 minutes on an H200
    python scripts/gpu_check.py --dry-run --out /tmp/x  # the same code on the CPU, tiny shapes, seconds

The GPU machine's image has torch but not gradio: run scripts/gpu_wheels.sh here first, carry .whl,
and begin the device command with
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 && python3 scripts/gpu_check.py --out "$OUT"

Nothing can be downloaded there, so the 8B-class models are built on the GPU from the exact configs
of LLaDA-8B-Instruct and Dream-v0-Instruct-7B with random bf16 weights. It measures:
1. forward cost: a full pass and a partial pass (block 32 + k rows) at prompt + gen of 1000 + 256,
   1000 + 512 and 256 + 256, beside the floor of reading the weights once at the measured bandwidth;
   at 1000 + 256 also the partial pass under torch.compile (first shape only) and replayed from a
   CUDA graph, the two ways to take the host's per-operator cost out of it;
2. end to end: `none` against EntropyCache whose full/partial decisions are replayed from the
   schedule the embedded model produces (random weights make entropy meaningless), one token per
   step and with threshold 0.9 (unmask counts replayed as steps per block); speedup, the schedule's
   ceiling from the forward costs, decision overhead, tokens/s, peak memory;
3. the embedded model's own interleaved bench on this device, with torch's choice of attention
   backend and again without cuDNN's (which builds a plan for each new shape);
4. the app: app.py serving a random model of LLaDA's shape (LLaDA's file layout, the embedded
   tokenizer) through its --model flag, one short race and one cancelled race through gradio_client.
It writes gpu_check.json and gpu_check.md under --out and prints the table.

Then, in a second call if at least 4 minutes of device time are left, the app under load on that
machine's 16 dedicated cores (the embedded model decodes on the CPU there too; on the 2-core VM a
short race alone moves up to 20% on its own, docs/BENCHMARKS.md "The app under load"):
    (the same install and export) && python3 scripts/load_test.py --short --no-app 8 \
        --visitors 1,2,4,8,1 --races 3 --max-seconds 150 | tee "$OUT/load.txt"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.bench import Contender, run_bench  # noqa: E402
from core.config import ModelConfig  # noqa: E402
from core.decoder import DecodeConfig, decode, generate  # noqa: E402
from core.device import sync  # noqa: E402
from core.families import FAMILIES  # noqa: E402
from core.forward_cost import forward_costs, weight_bytes  # noqa: E402
from core.loading import chat_prompt_ids, load_model, part_shapes  # noqa: E402
from core.model import DiffusionTransformer  # noqa: E402
from core.policies import TABLE_ORDER, make_policy  # noqa: E402
from core.policies.entropy import EntropyCache  # noqa: E402
from core.tasks import held_out  # noqa: E402
from core.tasks.word_problems import make_split  # noqa: E402

# The exact shapes of the two checkpoints (their config.json), and tiny stand-ins for the dry run.
SHAPES = {
    "LLaDA-8B-Instruct": dict(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_dim=12288,
                              rope_theta=500000.0, mask_token_id=126336, max_seq_len=4096, family="llada"),
    "Dream-v0-Instruct-7B": dict(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_dim=18944,
                                 rope_theta=1000000.0, mask_token_id=151666, qkv_bias=True, logit_shift=1,
                                 max_seq_len=32768, family="dream"),
}
TINY = dict(vocab_size=512, dim=64, n_layers=2, ffn_dim=128, mask_token_id=500)
LENGTHS = [(1000, 256), (1000, 512), (256, 256)]  # (prompt, gen)
TINY_LENGTHS = [(40, 32), (40, 64), (16, 32)]
BLOCK, K, TAU, THRESHOLD = 32, 2, 0.5, 0.9
NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def build(shape: dict, device: torch.device, dry: bool) -> DiffusionTransformer:
    """A model of this shape with random weights, built on the device in bf16 (float32 on CPU)."""
    tiny = dict(TINY, n_heads=4, n_kv_heads=2 if shape["family"] == "dream" else 4)
    cfg = ModelConfig(**{**shape, **tiny} if dry else shape)
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


def bandwidth(device: torch.device, dry: bool) -> float:
    """Bytes per second a device-to-device copy moves, counting bytes read and written."""
    n = (2**20 if dry else 2**31) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    sync(device)
    return 2 * a.numel() * a.element_size() * 10 / (time.perf_counter() - t0)


def forward_part(model, lengths, bytes_per_s: float, repeats: int) -> list[dict]:
    """Full and partial (block + k rows) pass at each length, beside the weight-read floor."""
    floor_s = weight_bytes(model) / bytes_per_s
    out = []
    for prompt, gen in lengths:
        length = prompt + gen
        costs = forward_costs(model, length, [length, BLOCK + K], repeats=repeats)
        partial = costs[BLOCK + K]
        out.append(dict(prompt=prompt, gen=gen, full_ms=costs[length] * 1e3, partial_ms=partial * 1e3,
                        partial_share=partial / costs[length], floor_ms=floor_s * 1e3,
                        partial_over_floor=partial / floor_s))
    return out


def partial_inputs(model, length: int) -> tuple:
    """The arguments of one partial pass: the last block + k rows of a fresh cache of `length` positions."""
    device = model.embed.weight.device
    ids = torch.randint(0, model.config.vocab_size, (1, BLOCK + K), device=device)
    rows = torch.arange(length - BLOCK - K, length, device=device)
    return ids, model.new_cache(1, length), rows, torch.tensor([length - 1], device=device)


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


def compiled_partial(model, length: int, repeats: int) -> float | None:
    """A partial pass under torch.compile (dynamic rows), seconds; None if compiling fails here."""
    try:
        compiled = torch.compile(model, dynamic=True)
        args = partial_inputs(model, length)
        with torch.no_grad():
            return seconds_per_call(lambda: compiled(*args), model.embed.weight.device, repeats)
    except Exception as e:  # noqa: BLE001 -- report, never fail the whole check on an optional speed-up
        print(f"torch.compile of the partial pass failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def graphed_partial(model, length: int, repeats: int) -> float | None:
    """A partial pass replayed from a CUDA graph (its row count is fixed at block + k, so one capture
    serves every step): the pass without the host's cost of issuing each operator from Python.
    Seconds per pass; None if capturing fails here."""
    try:
        device = model.embed.weight.device
        args = partial_inputs(model, length)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.no_grad():
            with torch.cuda.stream(side):  # warm up off the default stream, as capture requires
                for _ in range(3):
                    model(*args)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(*args)
            return seconds_per_call(graph.replay, device, repeats)
    except Exception as e:  # noqa: BLE001 -- report, never fail the whole check on an optional speed-up
        print(f"CUDA graph capture of the partial pass failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None


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


def end_to_end(model, lengths, blocks, per_step: float | None, forward: list[dict]) -> list[dict]:
    """none and replayed EntropyCache on one random prompt per length; per_step: tokens per step
    to replay (None: one token per step)."""
    out = []
    device = model.embed.weight.device
    for (prompt, gen), cost in zip(lengths, forward):
        ids = torch.randint(0, model.config.mask_token_id, (prompt,)).tolist()
        n_blocks = gen // BLOCK
        steps = None if per_step is None else n_blocks * max(1, min(BLOCK, round(BLOCK / per_step)))
        config = DecodeConfig(gen_len=gen, block_len=BLOCK, steps=steps, stop_at_eos=False)
        row = dict(prompt=prompt, gen=gen, steps=steps or gen)
        for name, policy in (("none", make_policy("none")), ("entropy", ReplayedEntropy(blocks))):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            last = generate(model, ids, policy, config)
            t = last.totals
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
            row[name] = dict(compute_s=t.compute_s, full_steps=t.full_steps / t.steps, tokens_per_s=t.tokens_per_s,
                             decision=t.decision_s / t.compute_s, rows=t.rows_fraction, peak_gib=peak)
        f = row["entropy"]["full_steps"]
        row["speedup"] = row["none"]["compute_s"] / row["entropy"]["compute_s"]
        row["ceiling"] = 1 / (f + (1 - f) * cost["partial_share"])
        row["of_ceiling"] = row["speedup"] / row["ceiling"]
        out.append(row)
    return out


def embedded_bench(device: torch.device, n: int, backends: list | None = None) -> list[dict]:
    """The embedded model's interleaved bench; backends: the SDPA backends attention may use (None: torch's
    default choice)."""
    model, tokenizer = load_model(None, device=device)
    contenders = [Contender(p, {}) for p in TABLE_ORDER]
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        return run_bench(model, tokenizer, held_out("words", n), contenders, DecodeConfig(gen_len=64, block_len=BLOCK),
                         progress=False)


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


def app_check(folder: Path, dry: bool) -> dict:
    """app.py with --model folder; one short race and one cancelled race through gradio_client."""
    try:
        from gradio_client import Client

        from app.serving.registry import build_registry
    except ImportError as e:
        return {"ok": False, "skipped": f"gradio_client is not installed here ({e}); carry the app's wheels"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--model", str(folder)],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}/", time.time() + 300
        while "running at" not in Path(log.name).read_text():
            if server.poll() is not None or time.time() > deadline:
                return {"ok": False, "error": "the app did not start", "log": Path(log.name).read_text()[-3000:]}
            time.sleep(1)
        client = Client(url, verbose=False)
        label = build_registry([str(folder)]).labels[-1]  # the label the app gives the folder
        prompt = make_split("test", 1)[0].prompt
        args = dict(prompt=prompt, model=label, policy="none", tau=TAU, k=K, gen_len=32, block_len=BLOCK, steps=0,
                    threshold=0, temperature=0, seed=0)
        t0 = time.time()
        job = client.submit(*args.values(), api_name="/run")
        outputs = list(job)
        race_s = time.time() - t0
        long = client.submit(*{**args, "gen_len": 256}.values(), api_name="/run")
        time.sleep(2 if not dry else 0.5)
        long.cancel()
        again = list(client.submit(*args.values(), api_name="/run"))
        return {"ok": bool(outputs) and bool(again), "updates": len(outputs), "race_s": race_s,
                "final_banner": str(outputs[-1][0])[:300] if outputs else None}
    except Exception as e:  # noqa: BLE001 -- the check reports what broke
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "log": Path(log.name).read_text()[-3000:]}
    finally:
        server.terminate()
        server.wait(timeout=30)


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    head = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return head + ["| " + " | ".join(r) + " |" for r in rows]


def markdown(report: dict) -> str:
    lines = [f"GPU check, {report['date']}, {report['device']}, torch {report['torch']}, "
             f"copy bandwidth {report['bandwidth_gb_s']:.0f} GB/s", ""]
    for name, m in report["models"].items():
        floor = m["forward"][0]["floor_ms"]
        lines += [f"## {name} shape, random weights ({m['weight_gb']:.1f} GB read per pass, floor {floor:.2f} ms)", ""]
        lines += table(["prompt + gen", "full ms", "partial ms", "partial / full", "partial / floor"], [
            [f"{r['prompt']} + {r['gen']}", f"{r['full_ms']:.2f}", f"{r['partial_ms']:.2f}",
             f"{r['partial_share']:.3f}", f"{r['partial_over_floor']:.2f}x"] for r in m["forward"]])
        if m.get("compiled_partial_ms"):
            lines += ["", f"Partial pass under torch.compile: {m['compiled_partial_ms']:.2f} ms."]
        if m.get("graphed_partial_ms"):
            lines += ["", f"Partial pass replayed from a CUDA graph: {m['graphed_partial_ms']:.2f} ms."]
        for mode, rows in m["end_to_end"].items():
            lines += ["", f"End to end, {mode}:", ""]
            lines += table(["prompt + gen", "steps", "speedup", "ceiling", "of ceiling", "full steps", "decision",
                            "tok/s none", "tok/s entropy", "peak GiB"], [
                [f"{r['prompt']} + {r['gen']}", str(r["steps"]), f"{r['speedup']:.2f}x", f"{r['ceiling']:.2f}x",
                 f"{r['of_ceiling']:.0%}", f"{r['entropy']['full_steps']:.3f}", f"{r['entropy']['decision']:.2%}",
                 f"{r['none']['tokens_per_s']:.1f}", f"{r['entropy']['tokens_per_s']:.1f}",
                 f"{r['entropy']['peak_gib'] or 0:.1f}"] for r in rows])
        lines.append("")
    lines += ["", "## The embedded model's bench on this device", ""]
    lines += table(["policy", "acc", "agree", "speedup", "ceiling", "decision", "speedup without cuDNN"], [
        [r["label"], f"{r['accuracy']:.3f}", f"{r['agreement']:.3f}", f"{r['speedup']:.2f}x", f"{r['ceiling']:.2f}x",
         f"{r['decision_overhead']:.2%}", f"{q['speedup']:.2f}x"]
        for r, q in zip(report["embedded_bench"], report["embedded_bench_no_cudnn"])])
    app = {k: v for k, v in report["app"].items() if k != "log"}
    lines += ["", f"## The app: {json.dumps(app)}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu-check"))
    ap.add_argument("--dry-run", action="store_true", help="the same code on the CPU with tiny shapes")
    ap.add_argument("--skip-app", action="store_true")
    args = ap.parse_args(argv)
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("error: no CUDA GPU here; use --dry-run for the CPU rehearsal", file=sys.stderr)
        return 2
    device = torch.device("cpu" if dry else "cuda")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lengths, repeats = (TINY_LENGTHS, 2) if dry else (LENGTHS, 10)
    report = dict(date=time.strftime("%Y-%m-%d %H:%M"), torch=torch.__version__, python=platform.python_version(),
                  device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)",
                  command=" ".join(sys.argv), models={})

    embedded, tokenizer = load_model(None, device=device)
    schedules = {"one token per step": schedule(embedded, tokenizer, None, 4 if dry else 20),
                 "threshold 0.9": schedule(embedded, tokenizer, THRESHOLD, 4 if dry else 20)}
    report["schedules"] = {mode: dict(full_steps=sum(map(sum, b)) / sum(map(len, b)), tokens_per_step=per)
                           for mode, (b, per) in schedules.items()}
    bytes_per_s = bandwidth(device, dry)
    report["bandwidth_gb_s"] = bytes_per_s / 1e9
    for name, shape in SHAPES.items():
        t0 = time.time()
        model = build(shape, device, dry)
        m = dict(weight_gb=weight_bytes(model) / 1e9)
        report["models"][name] = m
        m["forward"] = forward_part(model, lengths, bytes_per_s, repeats)
        save(out, report)
        m["end_to_end"] = {mode: end_to_end(model, lengths, blocks, None if mode.startswith("one") else per,
                                            m["forward"]) for mode, (blocks, per) in schedules.items()}
        save(out, report)
        # Compiling an 8B model takes a minute or two: once, for the first shape only.
        compiled = compiled_partial(model, sum(lengths[0]), repeats) if not dry and len(report["models"]) == 1 else None
        m["compiled_partial_ms"] = compiled * 1e3 if compiled else None
        graphed = graphed_partial(model, sum(lengths[0]), repeats) if not dry else None
        m["graphed_partial_ms"] = graphed * 1e3 if graphed else None
        m["seconds"] = time.time() - t0
        save(out, report)
        print(f"{name}: done in {m['seconds']:.0f} s", flush=True)
        if name.startswith("LLaDA") and not args.skip_app:
            with tempfile.TemporaryDirectory() as folder:
                write_llada_layout(model, Path(folder) / "llada-shaped", tokenizer)
                del model
                free()
                report["app"] = app_check(Path(folder) / "llada-shaped", dry)
        else:
            del model
            free()
    report.setdefault("app", {"ok": None, "skipped": "--skip-app"})
    save(out, report)
    report["embedded_bench"] = embedded_bench(device, 2 if dry else 20)
    save(out, report)
    # Is the variable-row policies' slowness cuDNN attention building a plan per shape? The same bench
    # without cuDNN.
    report["embedded_bench_no_cudnn"] = embedded_bench(device, 2 if dry else 20, NO_CUDNN)
    save(out, report)
    text = markdown(report)
    (out / "gpu_check.md").write_text(text)
    print(text)
    return 0


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
