"""The command line, `python -m evaluation COMMAND ...`: the parser and its entry point (parser.py), the flags
every command shares (flags.py), and one module per command (generate.py, bench.py with forward_rows.py,
lm_eval.py)."""

from evaluation.cli.parser import main

__all__ = ["main"]
