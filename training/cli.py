"""The training command line, `python -m training COMMAND ...`.

    python -m training recipe sums-and-stories --out runs/sums-and-stories   # the embedded model, every stage
    python -m training train --out runs/my-model --minutes 30
    python -m training train --init-from runs/my-model --out runs/my-model-2 --minutes 30 --stories 0.55

Bad numbers are argparse errors ('error: ...', exit status 2) before anything is built or saved.
"""

from __future__ import annotations

import argparse
import sys

from training import recipes, train


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = ap.add_subparsers(dest="command", required=True)
    tr = commands.add_parser("train", help="one training run (seeded, resumable)",
                             description=train.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_arguments(tr)
    tr.set_defaults(run=lambda args: train.run(tr, args))
    rc = commands.add_parser("recipe", help="a model's whole training, every stage (resumable)",
                             description=recipes.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    recipes.add_arguments(rc)
    rc.set_defaults(run=lambda args: recipes.run(rc, args))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.run(args)
    except ValueError as e:  # e.g. --init-from a model whose layers do not fit
        print(f"error: {e}", file=sys.stderr)
        return 2
