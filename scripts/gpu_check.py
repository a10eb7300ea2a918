"""The GPU check: the decoder's graphed passes against its eager ones at real size, and the app, in one call.

    python scripts/gpu_check.py --out "$OUT"            # on the GPU machine: 3.5-6 minutes on an H100
    python scripts/gpu_check.py --dry-run --out /tmp/x  # the same code on the CPU, tiny shapes, seconds
    python scripts/gpu_check.py --app-only --out "$OUT" # only the app's part (a rerun of it), ~3 minutes

The GPU machine's image has torch but not gradio: run scripts/gpu_wheels.sh here first, carry .whl,
and begin the device command with
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 && python3 scripts/gpu_check.py --out "$OUT"

Nothing can be downloaded there, so the 8B-class models are built on the GPU from the exact configs
of LLaDA-8B-Instruct and Dream-v0-Instruct-7B with random bf16 weights. Random weights make entropy
meaningless, so EntropyCache's full/partial decisions are replayed from the schedule the embedded
model produces on held-out problems, one token per step and with threshold 0.9 (its unmask counts
replayed as steps per block). For each shape, at prompt + gen of 1000 + 256, 1000 + 512, 256 + 256
and a chat-sized 40 + 128, it measures:
1. one pass: a full and a partial one (block 32 + k rows), eager and replayed from a CUDA graph
   (core/passes.py), beside the floor of reading the weights once at the measured bandwidth;
2. end to end: `none` and EntropyCache, both eager (graphs=off) and both graphed (graphs=on):
   speedup, the schedule's ceiling from the pass costs, decision share, tokens/s, capture time, peak
   memory; one-token-per-step decodes are timed over their first MEASURED_BLOCKS blocks (a step costs
   the same in every block: the cache's length is fixed), threshold decodes whole;
3. that a graphed decode equals the same padded passes run eagerly, token for token, and how often
   it agrees with the unpadded eager decode (bf16 rounding differs there);
4. the host syncs of a graphed step (torch.cuda.set_sync_debug_mode);
then the embedded model's bench on this device, graphed and eager, and the app: app.py serving a
random model of LLaDA's full shape in its file layout through its --model flag (with a byte-level
tokenizer trained on the app's prompts, so that its long examples read), raced through gradio_client
on the graphed path: the long passage example at gen 256 (tau 12: only block starts refresh, as the
offline schedules), a chat-sized prompt at gen 128, a cancelled race and one after it; then the long
race's decode offline at its very prompt ids, the figure its banner must be within 15% of. It
writes gpu_check.json and gpu_check.md under --out and prints the table with the issue's targets
checked.

Then, in a second call if at least 4 minutes of device time are left, the app under load on that
machine's 16 dedicated cores (the embedded model decodes on the CPU there too):
    (the same install and export) && python3 scripts/load_test.py --short --no-app 8 \
        --visitors 1,2,4,8,1 --races 3 --max-seconds 150 | tee "$OUT/load.txt"
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.bench import Contender, run_bench  # noqa: E402
from core.config import ModelConfig  # noqa: E402
from core.decoder import DecodeConfig, decode  # noqa: E402
from core.device import sync  # noqa: E402
from core.families import FAMILIES  # noqa: E402
from core.forward_cost import copy_bandwidth, forward_costs, weight_bytes  # noqa: E402
from core.loading import chat_prompt_ids, load_model, part_shapes  # noqa: E402
from core.model import DiffusionTransformer  # noqa: E402
from core.passes import capture_off, idle_workspaces, passes_for, release_graphs  # noqa: E402
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
LENGTHS = [(1000, 256), (1000, 512), (256, 256), (40, 128)]  # (prompt, gen)
TINY_LENGTHS = [(40, 32), (40, 64), (16, 32), (8, 32)]
BLOCK, K, TAU, THRESHOLD = 32, 2, 0.5, 0.9
MEASURED_BLOCKS = 2
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


def graphed_costs(model, length: int, repeats: int) -> dict[str, float]:
    """Seconds of a full and a partial pass (the last block + k rows) replayed from their CUDA graphs
    (on a CPU: the same padded passes, eagerly)."""
    needed = list(range(length - BLOCK, length))
    with torch.no_grad(), passes_for(model, length, BLOCK, "on") as ws:
        ws.start(torch.randint(0, model.config.mask_token_id, (length - BLOCK,)).tolist())
        device = ws.device
        full = seconds_per_call(lambda: ws.run(model, None, needed), device, repeats)
        partial = seconds_per_call(lambda: ws.run(model, list(range(length - BLOCK - K, length)), needed), device,
                                   repeats)
    return {"full": full, "partial": partial}


def forward_part(model, lengths, bytes_per_s: float, repeats: int) -> list[dict]:
    """Full and partial pass at each length, eager and graphed, beside the weight-read floor."""
    floor_s = weight_bytes(model) / bytes_per_s
    out = []
    for prompt, gen in lengths:
        length = prompt + gen
        eager = forward_costs(model, length, [length, BLOCK + K], repeats=repeats)
        graphed = graphed_costs(model, length, repeats)
        out.append(dict(prompt=prompt, gen=gen, floor_ms=floor_s * 1e3,
                        full_ms=eager[length] * 1e3, partial_ms=eager[BLOCK + K] * 1e3,
                        partial_share=eager[BLOCK + K] / eager[length],
                        graphed_full_ms=graphed["full"] * 1e3, graphed_partial_ms=graphed["partial"] * 1e3,
                        graphed_partial_share=graphed["partial"] / graphed["full"],
                        graphed_partial_over_floor=graphed["partial"] / floor_s))
    release_graphs(model)
    return out


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


def end_to_end(model, lengths, schedules: dict, forward: list[dict]) -> dict[str, list[dict]]:
    """none and replayed EntropyCache on one random prompt per length, eager and graphed, in both modes."""
    out = {mode: [] for mode in MODES}
    for (prompt, gen), cost in zip(lengths, forward):
        ids = torch.randint(0, model.config.mask_token_id, (prompt,)).tolist()
        for mode in MODES:
            blocks, per_step = schedules[mode]
            threshold = mode != MODES[0]
            steps = gen // BLOCK * max(1, min(BLOCK, round(BLOCK / per_step))) if threshold else None
            max_steps = None if threshold else MEASURED_BLOCKS * BLOCK
            row = dict(prompt=prompt, gen=gen, steps=steps or gen)
            for graphs in ("off", "on"):
                config = DecodeConfig(gen_len=gen, block_len=BLOCK, steps=steps, stop_at_eos=False, graphs=graphs)
                for name, policy in (("none", make_policy("none")), ("entropy", ReplayedEntropy(blocks))):
                    row[f"{name}_{graphs}"] = {k: v for k, v in timed_decode(model, ids, policy, config, max_steps)
                                               .items() if k != "tokens"}
            for graphs, share in (("off", cost["partial_share"]), ("on", cost["graphed_partial_share"])):
                f = row[f"entropy_{graphs}"]["full_steps"]
                none, ours = row[f"none_{graphs}"], row[f"entropy_{graphs}"]
                row[f"speedup_{graphs}"] = none["s_per_token"] / ours["s_per_token"]
                row[f"ceiling_{graphs}"] = 1 / (f + (1 - f) * share)
                row[f"of_ceiling_{graphs}"] = row[f"speedup_{graphs}"] / row[f"ceiling_{graphs}"]
            out[mode].append(row)
        out[MODES[0]][-1]["graphs_captured"] = sum(len(ws.graphs) for ws in idle_workspaces(model))
        release_graphs(model)
    for vanilla, parallel in zip(out[MODES[0]], out[MODES[1]]):  # the paper's comparison: vs one token per step
        for graphs in ("off", "on"):
            parallel[f"vs_vanilla_{graphs}"] = (vanilla[f"none_{graphs}"]["s_per_token"]
                                                / parallel[f"entropy_{graphs}"]["s_per_token"])
    return out


def equality(model, length: tuple[int, int], blocks) -> dict:
    """A graphed decode against the same padded passes run eagerly (identical, or the graphs are
    wrong) and against the unpadded eager decode (bf16 rounding of other row counts may differ)."""
    prompt, gen = length
    ids = torch.randint(0, model.config.mask_token_id, (prompt,)).tolist()
    def tokens(name: str, graphs: str) -> list[int]:
        policy = make_policy("none") if name == "none" else ReplayedEntropy(blocks)
        config = DecodeConfig(gen_len=gen, block_len=BLOCK, stop_at_eos=False, graphs=graphs)
        return timed_decode(model, ids, policy, config, MEASURED_BLOCKS * BLOCK)["tokens"]

    out = {}
    for name in ("none", "entropy"):
        graphed = tokens(name, "on")
        with capture_off():
            static_eager = tokens(name, "on")
        plain = tokens(name, "off")
        out[name] = dict(graphed_equals_static_eager=graphed == static_eager,
                         agreement_with_unpadded=sum(a == b for a, b in zip(graphed, plain)) / len(graphed))
    release_graphs(model)
    return out


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
    return run_bench(model, tokenizer, held_out("words", n), contenders,
                     DecodeConfig(gen_len=gen_len, block_len=BLOCK, graphs=graphs), warmup, progress=False)


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
    return dict(prompt=prompt, model=label, policy="none", tau=12.0, k=K, gen_len=gen_len, block_len=BLOCK, steps=0,
                threshold=0, temperature=0, seed=0)


def app_check(folder: Path, dry: bool) -> dict:
    """app.py with --model folder, raced through gradio_client: the long passage (at gen 256), a chat-sized
    prompt (at gen 128), a cancelled race and one after it. Each finished race's banner speedup, its
    time panel in words, and the long race's prompt ids (for the offline figure at its length)."""
    try:
        from gradio_client import Client

        from app.race.client import named
        from app.serving.examples import CHAT_EXAMPLES
        from app.serving.long_prompts import LONG_PROMPTS
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
    graphed (on the CPU: the same padded passes, eagerly): none against EntropyCache at tau 12, each
    decoded once to capture its graphs and then timed, interleaved."""
    model = build(SHAPES["LLaDA-8B-Instruct"], device, dry)
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
    """The issue's targets, each with what was measured and whether it is met."""
    lines = []
    for name, m in report["models"].items():
        one, par = m["end_to_end"][MODES[0]], m["end_to_end"][MODES[1]]
        main = one[0]
        checks = [
            (f"graphed speedup at {main['prompt']} + {main['gen']}, one token per step >= 4x",
             main["speedup_on"] >= 4, f"{main['speedup_on']:.2f}x"),
            ("... and >= 80% of the schedule's ceiling", main["of_ceiling_on"] >= 0.8, f"{main['of_ceiling_on']:.0%}"),
            ("never below 1.0x at any shape (graphed, both modes)",
             min(r["speedup_on"] for r in one + par) >= 1, f"min {min(r['speedup_on'] for r in one + par):.2f}x"),
            ("graphed partial pass within 1.5x of the weight-read floor",
             max(r["graphed_partial_over_floor"] for r in m["forward"]) <= 1.5,
             f"max {max(r['graphed_partial_over_floor'] for r in m['forward']):.2f}x"),
            ("decision < 0.5% (graphed)", max(r["entropy_on"]["decision"] for r in one + par) < 0.005,
             f"max {max(r['entropy_on']['decision'] for r in one + par):.2%}"),
            (f"threshold 0.9 vs the one-token-per-step exact decoder at {par[0]['prompt']} + {par[0]['gen']} >= 15x",
             par[0]["vs_vanilla_on"] >= 15, f"{par[0]['vs_vanilla_on']:.1f}x"),
            ("graphed decode equals its padded passes run eagerly",
             all(v["graphed_equals_static_eager"] for v in m["equality"].values()), ""),
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


def markdown(report: dict) -> str:
    lines = [f"GPU check, {report['date']}, {report['device']}, torch {report['torch']}, "
             f"copy bandwidth {report['bandwidth_gb_s']:.0f} GB/s", ""]
    for name, m in report["models"].items():
        floor = m["forward"][0]["floor_ms"]
        lines += [f"## {name} shape, random weights ({m['weight_gb']:.1f} GB read per pass, floor {floor:.2f} ms)", ""]
        lines += table(["prompt + gen", "full ms eager / graphed", "partial ms eager / graphed",
                        "partial / full graphed", "partial / floor graphed"], [
            [f"{r['prompt']} + {r['gen']}", f"{r['full_ms']:.2f} / {r['graphed_full_ms']:.2f}",
             f"{r['partial_ms']:.2f} / {r['graphed_partial_ms']:.2f}", f"{r['graphed_partial_share']:.3f}",
             f"{r['graphed_partial_over_floor']:.2f}x"] for r in m["forward"]])
        for mode, rows in m["end_to_end"].items():
            lines += ["", f"End to end, {mode} (EntropyCache against none, both eager / both graphed):", ""]
            extra = ["vs one token per step, graphed"] if mode != MODES[0] else []
            lines += table(["prompt + gen", "steps", "speedup eager", "speedup graphed", "ceiling graphed",
                            "of ceiling", "full steps", "decision", "tok/s none / entropy graphed", "capture s",
                            "peak GiB", *extra], [
                [f"{r['prompt']} + {r['gen']}", str(r["steps"]), f"{r['speedup_off']:.2f}x", f"{r['speedup_on']:.2f}x",
                 f"{r['ceiling_on']:.2f}x", f"{r['of_ceiling_on']:.0%}", f"{r['entropy_on']['full_steps']:.3f}",
                 f"{r['entropy_on']['decision']:.2%}",
                 f"{r['none_on']['tokens_per_s']:.1f} / {r['entropy_on']['tokens_per_s']:.1f}",
                 f"{r['none_on']['capture_s'] + r['entropy_on']['capture_s']:.2f}",
                 f"{r['entropy_on']['peak_gib'] or 0:.1f}",
                 *([f"{r['vs_vanilla_on']:.1f}x"] if extra else [])] for r in rows])
        lines += ["", f"Token equality: {json.dumps(m['equality'])}", f"Host syncs per graphed step: "
                  f"{json.dumps(m['syncs'])}", ""]
    lines += ["## The embedded model's bench on this device (speedup over none)", ""]
    lines += table(["policy", "acc", "agree", "graphed", "eager", "decision graphed"], [
        [r["label"], f"{r['accuracy']:.3f}", f"{r['agreement']:.3f}", f"{r['speedup']:.2f}x", f"{q['speedup']:.2f}x",
         f"{r['decision_overhead']:.2%}"] for r, q in zip(report["embedded_bench"], report["embedded_bench_eager"])])
    lines += ["", f"## The app: {json.dumps(app_summary(report['app']))}", "", "## Targets", "", *targets(report)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu-check"))
    ap.add_argument("--dry-run", action="store_true", help="the same code on the CPU with tiny shapes")
    ap.add_argument("--skip-app", action="store_true")
    ap.add_argument("--app-only", action="store_true", help="only the app's race (a rerun of that part)")
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
    for name, shape in SHAPES.items():
        t0 = time.time()
        model = build(shape, device, dry)
        m = report["models"][name] = dict(weight_gb=weight_bytes(model) / 1e9)
        m["forward"] = forward_part(model, lengths, bytes_per_s, repeats)
        save(out, report)
        m["end_to_end"] = end_to_end(model, lengths, schedules, m["forward"])
        m["equality"] = equality(model, lengths[0], schedules[MODES[0]][0])
        m["syncs"] = syncs_per_step(model, lengths[0], schedules[MODES[0]][0])
        m["seconds"] = time.time() - t0
        save(out, report)
        print(f"{name}: done in {m['seconds']:.0f} s", flush=True)
        del model
        free()
    n, gen_len, warmup = (1, BLOCK, 0) if dry else (4, 2 * BLOCK, 1)
    report["embedded_bench"] = embedded_bench(device, n, gen_len, "on", warmup)
    report["embedded_bench_eager"] = embedded_bench(device, n, gen_len, "off", warmup)
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
