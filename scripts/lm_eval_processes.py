"""One lm-eval run of model `entropycache` on one process and on several (torchrun), timed side by side,
with the check that every run scored, answered and stepped as the first did.

    python -m evaluation lm-eval-task --out runs/lm-eval-task --n 40 --shots 0
    python scripts/lm_eval_processes.py --runs 1x2,1x1,2x1 --out runs/lm-eval-processes -- \
        --model entropycache --device cpu --include_path runs/lm-eval-task --tasks wordproblems_0shot \
        --apply_chat_template --fewshot_as_multiturn false --model_args policy=entropy,baseline=none

A run `PxT` is P processes of T threads each on the CPU (T=0: torch's default; several processes
always get their share of the cores, evaluation/lm_eval_ranks.py); on GPUs, `--runs 1,8 -- ... --device cuda`.
Wall time is the whole command's: start-up, task and weights loading included. The machine's load
average is printed before each run: other work on the cores slows every run, unevenly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def command(processes: int, lm_eval_args: list[str], out: Path) -> list[str]:
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    return [*launcher, "-m", "evaluation", "lm-eval", *lm_eval_args, "--output_path", str(out), "--log_samples"]


def written(out: Path) -> dict:
    """What a run wrote: its scores, each document's answers, each request's steps, ranks."""
    (results,) = out.rglob("results_*.json")
    data = json.loads(results.read_text())
    answers = {}
    for samples in out.rglob("samples_*.jsonl"):
        task = re.match(r"samples_(.+)_\d{4}-\d\d-\d\dT", samples.name).group(1)
        for line in samples.read_text().splitlines():
            doc = json.loads(line)
            answers[(task, doc["doc_id"])] = (doc["resps"], doc["filtered_resps"])
    speed = data.get("entropycache_speed", {})
    steps = {(r["task"], r["doc_id"], r["policy"]): (r["steps"], r["full_steps"], r["rows_computed"], r["tokens"])
             for r in speed.get("per_request", [])}
    scores = {f"{task} {metric.split(',')[0]}": value for task, metrics in data["results"].items()
              for metric, value in metrics.items() if isinstance(value, float) and "stderr" not in metric}
    return {"scores": scores, "answers": answers, "steps": steps,
            "ranks": sorted({r["rank"] for r in speed.get("per_request", [])}), "decodes": len(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="1,2", help="PxT or P, comma-separated: P processes of T threads each")
    ap.add_argument("--out", type=Path, required=True, help="a folder for each run's lm-eval output")
    ap.add_argument("lm_eval_args", nargs=argparse.REMAINDER, help="after --: lm-eval's arguments")
    args = ap.parse_args()
    lm_eval_args = [a for a in args.lm_eval_args if a != "--"]
    rows, first = [], None
    for run in args.runs.split(","):
        processes, _, threads = run.partition("x")
        env = dict(os.environ)
        if threads and int(threads):
            env["OMP_NUM_THREADS"] = threads
        out = args.out / run
        if out.exists() and any(out.iterdir()):  # an earlier run's files would be read as this one's
            sys.exit(f"{out} holds an earlier run: pass another --out")
        load = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run(command(int(processes), lm_eval_args, out), cwd=ROOT, env=env)
        wall = time.perf_counter() - started
        if done.returncode:
            sys.exit(f"run {run} failed (exit {done.returncode})")
        got = written(out)
        first = first or got
        same = {k: got[k] == first[k] for k in ("scores", "answers", "steps")}
        scores = ", ".join(f"{name} {value:.3f}" for name, value in got["scores"].items())
        # evaluation/lm_eval_ranks.py gives each process its share of the cores
        each = threads or ("default" if int(processes) == 1 else "its share of the cores")
        rows.append(f"| {processes} | {each} | {load:.2f} | {wall:.1f} | {scores} | {got['decodes']} | "
                    f"{','.join(map(str, got['ranks']))} | {same['scores']} | {same['answers']} | {same['steps']} |")
    print("| processes | threads each | load before | wall s | scores | decodes | ranks | "
          "scores as run 1 | answers as run 1 | steps as run 1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
