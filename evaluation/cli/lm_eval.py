"""`python -m evaluation lm-eval` (lm-eval's own command line, the model `entropycache` registered:
evaluation/lm_eval_run.py) and `lm-eval-task` (the held-out word problems as an lm-eval task folder).
lm-eval is imported only when one of them runs: it is not a runtime dependency."""

from __future__ import annotations

import argparse

from evaluation.outputs import check_writable


def lm_eval_modules():
    """The lm-eval side of the package, imported only when asked for (lm-eval is not a runtime dependency)."""
    try:
        from evaluation import lm_eval_run
        from evaluation.tasks import lm_eval_export
    except ModuleNotFoundError as e:
        if e.name != "lm_eval" and not (e.name or "").startswith("lm_eval."):
            raise
        raise ValueError("lm-eval is not installed: pip install -r requirements-eval.txt") from None
    return lm_eval_run, lm_eval_export


def run(args: argparse.Namespace) -> int:
    lm_eval_run, _ = lm_eval_modules()
    return lm_eval_run.run_cli(args.args)


def run_task(args: argparse.Namespace) -> int:
    if not 1 <= args.n <= 1000:
        raise ValueError(f"--n must be in [1, 1000], got {args.n}")
    if not 0 <= args.shots <= 8:
        raise ValueError(f"--shots must be in [0, 8], got {args.shots}")
    check_writable(args.out, "--out", folder=True)
    _, lm_eval_export = lm_eval_modules()
    name = lm_eval_export.write_task(args.out, args.n, args.shots)
    print(f"wrote task {name} to {args.out}: lm-eval ... --include_path {args.out} --tasks {name} "
          f"--num_fewshot {args.shots}")
    return 0
