"""`python -m evaluation lm-eval`: lm-eval's own command line with the model `entropycache` registered
(evaluation/lm_eval_model.py), a task that asks for likelihoods refused before anything loads, and the
speed summary after lm-eval's accuracy table, gathered from every rank and added to the results JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from lm_eval.__main__ import cli_evaluate
from lm_eval.tasks import TaskManager

from evaluation.lm_eval_model import GENERATION_ONLY, LIKELIHOOD_TYPES, EntropyCacheLM
from evaluation.lm_eval_ranks import leave


def run_cli(argv: list[str]) -> int:
    """lm-eval's own command line with `entropycache` registered; then the speed summary, gathered from
    every rank, printed after lm-eval's accuracy table and added to the results JSON it wrote (key
    `entropycache_speed`), by rank 0 alone."""
    refuse_likelihood_tasks(argv)
    started = time.time()
    EntropyCacheLM.last = None
    saved, sys.argv = sys.argv, ["lm-eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    lm = EntropyCacheLM.last
    if lm is None:
        return 0
    speed = lm.gathered_speed()
    if lm.accelerator is not None:
        leave(lm.accelerator)  # torch warns at exit otherwise, and a gloo thread may abort the exit
    if speed is None or not speed.requests:
        return 0
    print("entropycache speed:\n" + lm.speed_table(speed))
    summary = lm.speed_summary(speed)
    for results in _results_written(argv, started):
        data = json.loads(results.read_text())
        data["entropycache_speed"] = summary
        results.write_text(json.dumps(data, indent=2, default=str))
        print(f"speed summary added to {results}")
    return 0


def refuse_likelihood_tasks(argv: list[str]) -> None:
    """A ValueError if lm-eval's arguments run model `entropycache` on any task that asks for
    likelihoods: lm-eval builds the model before its tasks and runs request types in the order the
    tasks come, so a likelihood task would otherwise fail after the weights load, or after hours of
    generation for the tasks before it."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--model", "-M")
    ap.add_argument("--tasks", "-t", nargs="+", default=[])
    ap.add_argument("--include_path")
    args, _ = ap.parse_known_args(argv)
    names = [name for arg in args.tasks for name in arg.split(",") if name]
    if args.model != "entropycache" or not names:
        return
    # Indexing lm-eval's own thousands of task files takes seconds: a run of tasks of one's own folder skips it.
    own = TaskManager(include_path=args.include_path, include_defaults=False) if args.include_path else None
    found, unknown = likelihood_tasks(own.task_index if own else {}, names)
    if unknown:
        found, _ = likelihood_tasks(TaskManager(include_path=args.include_path).task_index, names)
    if found:
        listed = ", ".join(f"{name} ({kind})" for name, kind in list(found.items())[:4])
        more = f" and {len(found) - 4} more" if len(found) > 4 else ""
        kinds = "/".join(sorted(set(found.values())))
        raise ValueError(f"{GENERATION_ONLY.format(kind=kinds)}: --tasks holds {listed}{more}")


def likelihood_tasks(index: Mapping, names: list[str]) -> tuple[dict[str, str], list[str]]:
    """({task: its output type} for the tasks among `names`, groups and tags opened, that ask for
    likelihoods, as lm-eval's task index declares them; the names the index does not hold). No task is
    built (building one loads its data); what the index leaves unsaid (a Python task, a type a group
    sets) passes, and its requests raise later."""
    found, unknown, todo, seen = {}, [], list(reversed(names)), set()
    while todo:
        name = todo.pop()
        if not isinstance(name, str) or name in seen:
            continue
        seen.add(name)
        entry = index.get(name)
        if entry is None:
            unknown.append(name)
            continue
        cfg = entry.cfg or {}
        if entry.kind.name == "TAG":
            todo += sorted(entry.tags, reverse=True)
        elif entry.kind.name == "GROUP":
            members = cfg.get("task") if isinstance(cfg.get("task"), list) else []
            todo += [m.get("task", m.get("group")) if isinstance(m, dict) else m for m in reversed(members)]
        elif cfg.get("output_type") in LIKELIHOOD_TYPES:
            found[name] = cfg["output_type"]
    return found, unknown


def _results_written(argv: list[str], since: float) -> list[Path]:
    """The results JSON files lm-eval wrote under --output_path during this run."""
    for flag in ("--output_path", "-o"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            root = Path(argv[argv.index(flag) + 1])
            found = [root] if root.suffix == ".json" else root.rglob("results_*.json")
            return [p for p in found if p.exists() and p.stat().st_mtime >= since]
    return []
