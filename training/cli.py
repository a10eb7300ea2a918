"""The training command line, `python -m training COMMAND ...`.

    python -m training recipe sums-and-stories --out runs/sums-and-stories   # the embedded model, every stage
    python -m training train --out runs/my-model --minutes 30
    python -m training train --init-from runs/my-model --out runs/my-model-2 --minutes 30 --stories 0.55

Bad numbers are argparse errors ('error: ...', exit status 2) before anything is built or saved.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from training import recipes, train


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = ap.add_subparsers(dest="command", required=True)
    _add_command(commands, "train", train, "one training run (seeded, resumable)")
    _add_command(commands, "recipe", recipes, "a model's whole training, every stage (resumable)")
    return ap


def _add_command(commands: argparse._SubParsersAction, name: str, module: ModuleType, help: str) -> None:
    """The command `name`, all of it `module`'s: its docstring is the command's description, its
    add_arguments(parser) adds the flags, and its run(parser, args) runs it."""
    command = commands.add_parser(name, help=help, description=module.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(command)
    command.set_defaults(run=lambda args: module.run(command, args))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.run(args)
    except ValueError as e:  # e.g. --init-from a model whose layers do not fit
        print(f"error: {e}", file=sys.stderr)
        return 2
