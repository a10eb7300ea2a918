"""Resumable training state: the weights, Adam's moments, the step and the time spent, saved together so a
run continues exactly where its last save left it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def save_state(state_dir: Path, model, opt, step: int, elapsed_s: float, args, finished: bool = False) -> None:
    """Save the run at `step`; `finished`: its steps or its time budget are spent (not paused, not interrupted)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, state_dir / "model.safetensors")
    moments = {}
    for i, p in enumerate(model.parameters()):
        s = opt.state.get(p, {})
        if s:
            moments[f"{i}.exp_avg"], moments[f"{i}.exp_avg_sq"] = s["exp_avg"], s["exp_avg_sq"]
    save_file(moments, state_dir / "optimizer.safetensors")
    (state_dir / "state.json").write_text(
        json.dumps({"step": step, "elapsed_s": elapsed_s, "finished": finished, "args": _flags(args)}, indent=1)
    )


def _flags(args: argparse.Namespace) -> dict:
    """The training flags' values (the command line also keeps its own entries in the namespace)."""
    return {k: v for k, v in vars(args).items() if isinstance(v, int | float | str | bool | None)}


def load_state(state_dir: Path, model, opt) -> tuple[int, float]:
    model.load_state_dict(load_file(state_dir / "model.safetensors"))
    moments = load_file(state_dir / "optimizer.safetensors")
    state = json.loads((state_dir / "state.json").read_text())
    step = state["step"]
    for i, p in enumerate(model.parameters()):
        if f"{i}.exp_avg" in moments:
            opt.state[p] = {
                "step": torch.tensor(float(step)),
                "exp_avg": moments[f"{i}.exp_avg"],
                "exp_avg_sq": moments[f"{i}.exp_avg_sq"],
            }
    return step, state.get("elapsed_s", 0.0)


def saved_state(state_dir: Path) -> dict | None:
    """What state.json says of the run saved in `state_dir` (step, elapsed_s, finished, args: its flags),
    or None where no state was saved yet."""
    state_file = state_dir / "state.json"
    return json.loads(state_file.read_text()) if state_file.exists() else None


# What a resumed run may change: where it writes, when it pauses or saves, and what it started from (the
# saved weights replace that). Every other flag shapes the model: another value would mix two runs in one.
MAY_CHANGE_ON_RESUME = frozenset({"out", "state", "resume", "until", "pause_after", "save_every", "init_from"})


def changed_setting(saved_args: dict, args: argparse.Namespace, names: Iterable[str] | None = None) -> str:
    """The first flag among `names` (flag spellings; default: every saved flag a resumed run may not
    change) whose value in `args` is not the saved run's, said as 'was trained with --x A, this run asks
    for B'; '' when there is none."""
    names = [n for n in saved_args if n not in MAY_CHANGE_ON_RESUME] if names is None else names
    for flag in (name.replace("_", "-") for name in names):
        dest = flag.replace("-", "_")
        if hasattr(args, dest) and saved_args.get(dest) != getattr(args, dest):
            return f"was trained with --{flag} {saved_args.get(dest)}, this run asks for {getattr(args, dest)}"
    return ""
