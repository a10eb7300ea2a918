"""A package's command line run in the test's own process, as `python -m PACKAGE ARGS` runs it (its cli's
main(argv)), with what it printed: a run costs no interpreter start and no torch import (about 3 s each
on 2 cores). tests/evaluation/test_cli.py runs the `python -m` entry points themselves."""

from __future__ import annotations

import importlib
import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

MAINS = {"evaluation": "evaluation.cli", "training": "training.cli"}


def run_cli(module: str, *args: str) -> subprocess.CompletedProcess:
    """The exit status, stdout and stderr of `python -m module args`, run in this process (argparse's own
    exits, --help's and a bad flag's, included); help is printed one line per flag."""
    main = importlib.import_module(MAINS[module]).main
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), mock.patch.dict(os.environ, COLUMNS="300"):
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code
    return subprocess.CompletedProcess([module, *args], code or 0, out.getvalue(), err.getvalue())
