"""The command line: one entry point, `python -m evaluation COMMAND ...`.

    python -m evaluation generate --prompt "mia has 7 marbles . ..." --policy entropy --tau 1 --k 2
    python -m evaluation bench --policies none,entropy,dual --tau 0.5,1,2 --n 40 --json out/bench.json
    python -m evaluation bench --forward-rows 601,18,2          # the cost of one forward by rows computed
    python -m evaluation bench --drift --policies entropy        # entropy-vs-drift correlation, volatility
    python -m evaluation bench --task words --shots 4 --threshold 0.9   # k-shot prompts, parallel decoding
    python -m evaluation bench --prompts my_prompts.txt --policies none,entropy --tau 0.5,1,2 --k 2   # your prompts

The model flags are defined here; the decode flags come from the decode settings' declarations
(DecodeConfig.parameters), and each policy parameter's flag from the policies' (core/params.py):
`generate` takes one value, `bench` a comma list (a sweep over every combination). Wrong flags are
reported before the model is loaded, which for an 8B checkpoint takes minutes. Errors print as
'error: ...' with exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from core.policies import POLICIES, TABLE_ORDER
from evaluation.cli import bench as bench_command
from evaluation.cli import forward_rows, generate, lm_eval
from evaluation.cli.flags import add_decoding_args
from evaluation.tasks import TASKS


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m evaluation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = ap.add_subparsers(dest="command", required=True, metavar="{generate,bench,lm-eval,lm-eval-task}")

    gen = commands.add_parser("generate", help="decode one prompt; print the answer and a one-line summary")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--policy", default="entropy", choices=sorted(POLICIES))
    add_decoding_args(gen, lists=False)
    gen.set_defaults(run=generate.run)

    bench = commands.add_parser("bench", help="policies side by side on held-out problems (or --prompts), interleaved",
                                description="All policies run in one process on the same prompts and seed, "
                                "interleaved prompt by prompt (the order rotates), so machine noise hits them "
                                "alike. The first policy is the reference for agreement, speedup and ceiling.")
    bench.add_argument("--policies", default=",".join(TABLE_ORDER),
                       help="comma list; the first is the reference")
    bench.add_argument("--task", default=None, choices=TASKS, help="held-out items of this task (default: words), "
                       "decoded with what the model declares for it (stories: temperature 0.7 for the embedded "
                       "model); mix decodes both tasks with one config")
    bench.add_argument("--shots", default=None, help="worked examples before each word problem (k-shot; default "
                       "0); a comma list, e.g. 0,2,4,8, runs one bench per count (a context sweep)")
    bench.add_argument("--n", type=int, default=None, help="held-out items (default: 50)")
    bench.add_argument("--prompts", default=None, metavar="FILE",
                       help="instead of held-out items: your own prompts, one a line (blank lines skipped); "
                       "a row has no accuracy then, and agreement and first divergence with the first policy")
    bench.add_argument("--warmup", type=int, default=1)
    bench.add_argument("--json", default=None, help="write the result rows here, each with what it decoded "
                       "for every prompt (per_prompt: text, tokens, first divergence, full steps); with "
                       "--drift, the drift report")
    bench.add_argument("--forward-rows", default=None, help="instead: time one forward per row count, e.g. 601,18,2")
    bench.add_argument("--length", type=int, default=None,
                       help=f"cache length for --forward-rows (default: {forward_rows.FORWARD_LENGTH}, a 4-shot prompt "
                       "+ gen 256)")
    bench.add_argument("--drift", action="store_true", help="instead: entropy-vs-drift correlation and volatility")
    add_decoding_args(bench, lists=True)
    bench.set_defaults(run=bench_command.run)

    ev = commands.add_parser("lm-eval", help="lm-evaluation-harness with our decoder as model `entropycache` "
                             "(needs requirements-eval.txt); every argument goes to lm-eval",
                             description="lm-eval's own command line, with the model `entropycache` registered "
                             "(evaluation/lm_eval_model.py); the speed summary follows lm-eval's table.")
    ev.set_defaults(run=lm_eval.run)  # main() hands everything after `lm-eval` to lm-eval unparsed

    task = commands.add_parser("lm-eval-task", help="write the held-out word problems as an lm-eval task folder")
    task.add_argument("--out", required=True, help="the folder to write (pass it to lm-eval as --include_path)")
    task.add_argument("--n", type=int, default=40, help="held-out problems")
    task.add_argument("--shots", type=int, default=0, help="worked examples before each problem")
    task.set_defaults(run=lm_eval.run_task)

    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lm-eval"] and not {"-h", "--help"} & set(argv[1:2]):
        args = argparse.Namespace(run=lm_eval.run, args=argv[1:])
    else:
        args = parser().parse_args(argv)
    try:
        return args.run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
