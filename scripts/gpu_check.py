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
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.fusion import fusion_state  # noqa: E402
from core.loading import load_model  # noqa: E402
from evaluation.forward_cost import copy_bandwidth, weight_bytes  # noqa: E402
from scripts.gpu_checks.app_race import app_part, app_summary  # noqa: E402
from scripts.gpu_checks.attention import attention_backends  # noqa: E402
from scripts.gpu_checks.embedded_bench import embedded_bench  # noqa: E402
from scripts.gpu_checks.end_to_end import end_to_end, summarize  # noqa: E402
from scripts.gpu_checks.equality import equality, equality_tokens  # noqa: E402
from scripts.gpu_checks.forward import forward_part, fused_part, rows_curve  # noqa: E402
from scripts.gpu_checks.peak import card_peak  # noqa: E402
from scripts.gpu_checks.replayed import schedule  # noqa: E402
from scripts.gpu_checks.report import head_commit, markdown, save, targets  # noqa: E402
from scripts.gpu_checks.shapes import BLOCK, LENGTHS, MODES, REPEATS, SHAPES, THRESHOLD, TINY_LENGTHS, build, free  # noqa: E402
from scripts.gpu_checks.syncs import syncs_per_step  # noqa: E402


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


if __name__ == "__main__":
    sys.exit(main())
