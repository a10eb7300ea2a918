"""Recipes: a model's whole training, declared once as stages of trainer settings.

    python -m training recipe sums-and-stories --out runs/sums-and-stories

Each stage is one `python -m training train` run with the settings declared here; a stage may start
from an earlier stage's model. Every stage keeps its model and its resumable state under the recipe's
folder, OUT/<stage>/model and OUT/<stage>/state, so a recipe that is interrupted and run again skips
the stages that finished and resumes the stage under way from its last saved state (every
--save-every steps).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.outputs import unwritable
from training import train
from training.state import changed_setting, saved_state

Setting = int | float | str


@dataclass(frozen=True)
class Stage:
    name: str  # its folder under the recipe's --out
    about: str  # what it trains, in a line
    settings: dict[str, Setting] = field(default_factory=dict)  # trainer flags without their "--"
    init_from: str | None = None  # the earlier stage whose model this one starts from


RECIPES: dict[str, tuple[Stage, ...]] = {
    # The embedded model, assets/sums-and-stories (docs/EMBEDDED_MODEL.md). Two stages because a
    # mixture trained from scratch in the same two hours solved about a third of the word problems:
    # the first learns the arithmetic on word problems alone, the second adds k-shot prompts and stories.
    "sums-and-stories": (
        Stage("word-problems", "word problems asked alone, a quarter of the rows arithmetic drills", {
            "steps": 6000, "minutes": 57, "save-every": 500, "lr": 2e-3, "warmup": 100,
            "batch-rows": 32, "stories": 0, "drills": 0, "drill-rows": 0.25, "long-words": 0, "max-shots": 0,
            "vocabulary": "words-0-shot", "gen-len": 64, "max-seq-len": 512,
        }),
        Stage("mixture", "word problems 0- to 8-shot, stories, drills", {
            "steps": 6000, "minutes": 63, "save-every": 100, "lr": 1e-3, "warmup": 50,
            "stories": 0.55, "drills": 0.1, "long-words": 0.25, "block-prefix": 0.5,
            # Greedy decoding of its stories loops (59% of their events repeat an earlier one), sampling
            # at 0.7 does not (docs/BENCHMARKS.md, "Stories that read like stories").
            "story-temperature": 0.7,
        }, init_from="word-problems"),
    ),
}


def model_folder(out: Path, stage: Stage) -> Path:
    return out / stage.name / "model"


def state_folder(out: Path, stage: Stage) -> Path:
    return out / stage.name / "state"


def stage_argv(recipe: str, stage: Stage, out: Path, steps: int | None = None) -> list[str]:
    """The `python -m training train` arguments of a stage of `recipe` run under `out`; `steps`, where
    given, replaces every stage's step count (a quick check of the whole recipe, not its model)."""
    argv = ["--out", str(model_folder(out, stage)), "--state", str(state_folder(out, stage))]
    if stage.init_from:
        earlier = next(s for s in RECIPES[recipe] if s.name == stage.init_from)
        argv += ["--init-from", str(model_folder(out, earlier))]
    settings = stage.settings | ({"steps": steps} if steps is not None else {})
    for flag, value in settings.items():
        argv += [f"--{flag}", f"{value:g}" if isinstance(value, float) else str(value)]
    return argv


def command_lines(recipe: str, out: Path, steps: int | None = None, width: int = 100) -> str:
    """Every stage of `recipe` as the command line that runs it, wrapped to `width` (the docs show these)."""
    lines = []
    for stage in RECIPES[recipe]:
        words = ["python", "-m", "training", "train", *stage_argv(recipe, stage, out, steps)]
        pieces = [" ".join(words[:4])] + [" ".join(words[i : i + 2]) for i in range(4, len(words), 2)]
        line = pieces[0]
        for piece in pieces[1:]:
            if len(line) + 1 + len(piece) + 2 > width:
                lines.append(line + " \\")
                line = "    " + piece
            else:
                line += " " + piece
        lines.append(line)
    return "\n".join(lines)


def run_recipe(recipe: str, out: Path, steps: int | None = None) -> int:
    """Run every stage of `recipe` under `out` not yet done, in order, resuming one that was interrupted."""
    stages = RECIPES[recipe]
    for i, stage in enumerate(stages, 1):
        head = f"stage {i} of {len(stages)}, {stage.name} ({stage.about})"
        code = _run_stage(recipe, stage, out, steps, head)
        if code:
            return code
    print(f"{recipe}: every stage done; the model is {model_folder(out, stages[-1])}")
    return 0


def _run_stage(recipe: str, stage: Stage, out: Path, steps: int | None, head: str) -> int:
    argv = stage_argv(recipe, stage, out, steps)
    ap = argparse.ArgumentParser(prog="python -m training train")
    train.add_arguments(ap)
    args = ap.parse_args(argv)
    saved = saved_state(state_folder(out, stage))
    if saved:
        _check_same_settings(state_folder(out, stage), saved["args"], stage, args)
    # config.json is the last file of a saved model: with it and a finished state, the stage is done
    if saved and saved.get("finished") and (model_folder(out, stage) / "config.json").exists():
        print(f"{head}: done, {model_folder(out, stage)}", flush=True)
        return 0
    args.resume = saved is not None
    print(f"{head}: {'resuming' if args.resume else 'starting'}\n"
          f"  python -m training train {' '.join(argv)}{' --resume' * args.resume}", flush=True)
    return train.run(ap, args)


def _check_same_settings(state_dir: Path, saved: dict, stage: Stage, args: argparse.Namespace) -> None:
    """Refuse to go on from a stage whose saved state was trained with other settings (`saved`: another
    --steps, or a recipe changed since): resuming it would mix two runs in one model."""
    if change := changed_setting(saved, args, ["steps", *stage.settings]):
        raise ValueError(f"{state_dir} {change}: pass another --out, or the settings it was started with")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The recipe flags (`python -m training recipe`, training/cli.py)."""
    ap.add_argument("recipe", choices=list(RECIPES))
    ap.add_argument("--out", required=True, help="the recipe's folder: every stage's model and resumable state")
    ap.add_argument("--steps", type=int, default=None,
                    help="every stage runs this many steps instead of its own (a quick check, not the model)")
    ap.add_argument("--dry-run", action="store_true", help="print each stage's command line; train nothing")


def run(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.steps is not None and args.steps < 1:
        ap.error(f"--steps must be a positive integer, got {args.steps}")
    if problem := unwritable(args.out, folder=True):  # before a stage, whose own check would name its subfolder
        ap.error(f"--out {args.out!r}: {problem}")
    if args.dry_run:
        print(command_lines(args.recipe, Path(args.out), args.steps))
        return 0
    return run_recipe(args.recipe, Path(args.out), args.steps)
