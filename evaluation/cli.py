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
from pathlib import Path

import torch

from core.compiled import (
    COMPILE_HELP,
    COMPILE_MODES,
    DEFAULT_COMPILE,
    compile_state,
    compiles,
    set_compile,
)
from core.config import GRAPH_MODES, GRAPHS_HELP, DecodeConfig
from core.decoder import generate
from core.fusion import FUSION_HELP, FUSION_MODES
from core.loading import (
    UnknownWordsError,
    answer_text,
    chat_prompt_ids,
    load_model,
    load_tokenizer,
    read_config,
    resolve,
)
from core.params import Param, value_text
from core.policies import POLICIES, TABLE_ORDER, make_policy
from core.refusal import check_choice
from core.threads import BUSY, TEAM, CoreLoad
from core.warmup import prepared_by
from evaluation.bench import bench_progress, bench_rows, contenders_from, format_table
from evaluation.diagnostics import drift_report, format_drift
from evaluation.forward_cost import copy_bandwidth, forward_costs, weight_bytes
from evaluation.outputs import check_writable, write_json
from evaluation.tasks import TASKS, held_out, own_items, prompt_lines
from evaluation.tasks.word_problems import example_prompt


def declared_params() -> dict[str, Param]:
    """Every policy parameter by name. Policies that share a name share its flag (same type)."""
    out: dict[str, Param] = {}
    for cls in POLICIES.values():
        for p in cls.parameters:
            if p.name in out and out[p.name].kind is not p.kind:
                raise TypeError(f"policies declare parameter {p.name!r} with two types")
            out.setdefault(p.name, p)
    return out


def add_model_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default=None, help="checkpoint folder, hub id, 'llada', 'dream' (default: embedded)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--fusion", choices=FUSION_MODES, default=FUSION_MODES[0], help=FUSION_HELP)
    ap.add_argument("--compile", choices=COMPILE_MODES, default=DEFAULT_COMPILE, help=COMPILE_HELP)


FORWARD_LENGTH = 601  # bench --forward-rows: a 4-shot word problem and a 256-token canvas
BY_MODEL = ("gen_len", "block_len")  # the model's own unless given (DecodeConfig.for_model)
FLAGS = {"block_len": "--block"}  # a decode setting's flag, where it is not --name


def add_decode_args(ap: argparse.ArgumentParser) -> None:
    """One flag per declared decode setting (DecodeConfig.parameters). None defaults here: a setting
    not given is the model's (gen and block length) or DecodeConfig's."""
    for p in DecodeConfig.parameters:
        default = "the model's" if p.name in BY_MODEL else p.unset or value_text(p.default)
        ap.add_argument(FLAGS.get(p.name, f"--{p.name.replace('_', '-')}"), dest=p.name, type=p.kind, default=None,
                        choices=p.choices or None, help=f"{p.help} (default: {default})")
    ap.add_argument("--graphs", choices=GRAPH_MODES, default=GRAPH_MODES[0], help=GRAPHS_HELP)


def add_decoding_args(ap: argparse.ArgumentParser, lists: bool) -> None:
    """The flags of a command that decodes: the model's, the decode settings' and the policy
    parameters' (`lists`: each parameter a comma list, a sweep over every combination)."""
    add_model_args(ap)
    add_decode_args(ap)
    add_policy_args(ap, lists)


def add_policy_args(ap: argparse.ArgumentParser, lists: bool) -> None:
    """One flag per declared policy parameter (`--tau`, `--k`; a one-letter name also gets `-k`)."""
    for p in declared_params().values():
        users = ", ".join(name for name, cls in POLICIES.items() if p in cls.parameters)
        flags = [f"--{p.name.replace('_', '-')}"] + ([f"-{p.name}"] if len(p.name) == 1 else [])
        text = f"{p.help} ({users}; default {value_text(p.default)}{'; comma list for a sweep' if lists else ''})"
        ap.add_argument(*flags, dest=p.name, type=str if lists else p.kind, default=None,
                        choices=None if lists else p.choices or None, help=text)


def policy_params(name: str, args: argparse.Namespace) -> dict:
    """The values given on the command line for the parameters policy `name` declares; a flag of
    another policy's parameter is an error, not silently ignored."""
    given = {n: getattr(args, n) for n in declared_params() if getattr(args, n) is not None}
    _refuse_unused(given, [name])
    return given


def _refuse_unused(given: dict, policies: list[str]) -> None:
    for n in given:
        if not any(n in {p.name for p in POLICIES[name].parameters} for name in policies if name in POLICIES):
            owners = ", ".join(k for k, c in POLICIES.items() if n in {p.name for p in c.parameters})
            raise ValueError(f"--{n.replace('_', '-')} is a parameter of {owners}, not of {', '.join(policies)}")


def _value_lists(args: argparse.Namespace) -> dict[str, list]:
    """The comma lists given for declared parameters, each value checked against its declaration."""
    out = {}
    for p in declared_params().values():
        text = getattr(args, p.name)
        if text is None:
            continue
        flag = f"--{p.name.replace('_', '-')}"
        if p.choices:  # names: each checked as it is written
            names = [v.strip() for v in text.split(",") if v.strip()]
            if not names:
                raise ValueError(f"{flag} must be a comma list of {', '.join(p.choices)}, got none in {text!r}")
            out[p.name] = [check_choice(v, p.choices, flag) for v in names]
            continue
        try:
            numbers = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"{flag} must be a comma list of numbers, got {text!r}") from None
        if not numbers:  # else the policy it belongs to would silently leave the bench
            raise ValueError(f"{flag} must be a comma list of numbers, got none in {text!r}")
        out[p.name] = [p.check(v) for v in numbers]
    return out


def decode_settings(args: argparse.Namespace) -> dict:
    """The decode settings given on the command line, checked before the model loads (an 8B one
    takes minutes): each against its declaration, and how they fit together when both lengths are
    given (else once the model's are known)."""
    settings = {p.name: p.check(getattr(args, p.name)) for p in DecodeConfig.parameters
                if getattr(args, p.name) is not None}
    if all(name in settings for name in BY_MODEL):
        DecodeConfig(**settings)
    return settings | {"graphs": args.graphs}


def check_prompts_fit(model: str | None, prompts: list[str], gen_len: int | None,
                      names: list[str] | None = None) -> None:
    """Every prompt is readable by the model and fits its positions with gen_len, checked from its
    config.json and tokenizer alone, before the weights load. `names`: how a message names each
    prompt (`--prompts line 3`)."""
    folder = resolve(model)  # a hub id is looked up once
    cfg, family, _ = read_config(folder)
    tokenizer = load_tokenizer(folder, family)
    gen = cfg.gen_len if gen_len is None else gen_len
    names = names or [""] * len(prompts)
    lengths = []
    for name, prompt in zip(names, prompts):
        try:
            lengths.append(len(chat_prompt_ids(tokenizer, prompt)))
        except ValueError as e:
            raise ValueError(f"{name}: {e}" if name else str(e)) from None
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    if lengths[longest] + gen > cfg.max_seq_len:
        where, fix = (f"{names[longest]}: the prompt", "a shorter prompt") if names[longest] else (
            "the longest prompt", "fewer --shots")
        raise ValueError(f"{where} ({lengths[longest]} tokens) + gen_len ({gen}) exceeds the model's "
                         f"{cfg.max_seq_len} positions: use {fix} or a shorter --gen-len")


def read_prompts(path: str) -> list[tuple[int, str]]:
    """--prompts FILE: (line number, prompt) for each line that is not blank."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--prompts: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    lines = prompt_lines(text)
    if not lines:
        raise ValueError(f"--prompts: {path} has no prompt (one prompt a line)")
    return lines


def bench_task(args: argparse.Namespace) -> str | None:
    """The held-out task a bench decodes (words unless --task says; none for --prompts): whose settings
    the model declares (ModelConfig.task_settings) apply. mix decodes both tasks with one config."""
    return None if args.prompts is not None else args.task or "words"


def bench_items(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The bench's items: {shots: held-out items} (one bench per count), or {None: the --prompts file's
    prompts}; and how a message names each prompt."""
    if args.prompts is None:
        n = 50 if args.n is None else args.n
        if not 1 <= n <= 1000:
            raise ValueError(f"--n must be in [1, 1000], got {n}")
        # a list: one bench per count (a context sweep)
        shots = _int_list("0" if args.shots is None else args.shots, "--shots", 0)
        return {k: held_out(bench_task(args), n, k) for k in shots}, []
    given = [flag for flag in ("task", "n", "shots") if getattr(args, flag) is not None]
    if given:
        raise ValueError(f"--prompts decodes the file's prompts: leave out --{', --'.join(given)}")
    lines = read_prompts(args.prompts)
    return {None: own_items([prompt for _, prompt in lines])}, [f"--prompts line {n}" for n, _ in lines]


def _load(args: argparse.Namespace):
    return load_model(args.model, device=args.device, dtype=getattr(torch, args.dtype) if args.dtype else None,
                      fusion=args.fusion, compile_mode=args.compile)


def run_generate(args: argparse.Namespace) -> int:
    policy = make_policy(args.policy, **policy_params(args.policy, args))
    settings = decode_settings(args)
    model, tokenizer = _load(args)
    config = DecodeConfig.for_model(model.config, **settings)
    try:
        prompt = chat_prompt_ids(tokenizer, args.prompt)
    except UnknownWordsError as e:  # only our word-level models have unknown words
        raise ValueError(f"{e}. The embedded model was trained only on word problems, e.g.:\n"
                         f"  python -m evaluation generate --prompt \"{example_prompt()}\"") from None
    last = generate(model, prompt, policy, config)
    t = last.totals
    print(answer_text(tokenizer, last))
    print(
        f"[{policy.describe()}] steps {t.steps}, full steps {t.full_steps}, "
        f"rows computed {t.rows_fraction:.1%} of full, time {t.compute_s:.3f}s, {t.tokens_per_s:.1f} tokens/s"
        + (f", CUDA graphs captured in {t.capture_s:.2f}s (not in the time)" if t.capture_s else ""),
        file=sys.stderr,
    )
    return 0


def _forward_rows(args: argparse.Namespace) -> tuple[list[int], int]:
    """--forward-rows as positive integers (a count >= the length times a full forward) and --length,
    checked against the model's positions in its config.json (a longer cache is none it decodes with);
    no counts without --forward-rows."""
    if args.forward_rows is None:
        if args.length is not None:
            raise ValueError("--length is the cache length of --forward-rows: pass it with --forward-rows")
        return [], 0
    counts = _int_list(args.forward_rows, "--forward-rows", 1)
    length = FORWARD_LENGTH if args.length is None else args.length
    if length < 1:
        raise ValueError(f"--length must be a positive integer, got {length}")
    cfg, _, _ = read_config(resolve(args.model))
    if length > cfg.max_seq_len:
        raise ValueError(f"--length {length} exceeds the model's {cfg.max_seq_len} positions")
    return counts, length


def _int_list(text: str, flag: str, low: int) -> list[int]:
    """A flag's value: one integer or a comma list of them, each at least `low` (0 or 1)."""
    noun = "positive integer" if low == 1 else "non-negative integer"
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} must be a {noun} or a comma list of them, got {text!r}") from None
    if min(counts) < low:
        raise ValueError(f"{flag} must be a {noun}, got {min(counts)}")
    return counts


def run_bench_command(args: argparse.Namespace) -> int:
    if args.warmup < 0:
        raise ValueError(f"--warmup must be a non-negative integer, got {args.warmup}")
    if args.json is not None:
        check_writable(args.json, "--json")
    items, names = bench_items(args)
    shots = list(items)
    policies, values = args.policies.split(","), _value_lists(args)
    contenders = contenders_from(policies, values)
    _refuse_unused(values, policies)
    if args.drift and len(contenders) != 1:
        raise ValueError("--drift probes one policy: pass exactly one, e.g. --policies entropy --tau 1")
    settings = decode_settings(args)
    row_counts, length = _forward_rows(args)
    if not row_counts:
        prompts = [item.prompt for some in items.values() for item in some]
        check_prompts_fit(args.model, prompts, settings.get("gen_len"), names)
    if (row_counts or args.drift) and len(shots) > 1:
        raise ValueError("--shots takes one count with --forward-rows or --drift")
    model, tokenizer = _load(args)
    task = bench_task(args)
    config = DecodeConfig.for_model(model.config, task=task, **settings)  # with the task's declared settings
    if row_counts:
        _print_forward_costs(model, length, row_counts, args.compile)
    elif args.drift:
        c = contenders[0]
        report = drift_report(model, tokenizer, [item.prompt for item in items[shots[0]]], c.policy, c.params, config)
        print(f"policy: {c.label}, {task or 'your prompts'}")
        print(format_drift(report))
        if args.json:
            write_json(args.json, {"policy": c.label, "task": task, **report})
    else:
        rows, load = [], CoreLoad()
        for k, some in items.items():  # one interleaved bench per context length
            result = bench_rows(bench_progress(model, tokenizer, some, contenders, config, warmup=args.warmup))
            if len(items) > 1:
                print(f"{task}, {k}-shot, mean prompt {result[0]['prompt_len']:.0f} tokens:")
            print(format_table(result))
            if captured := sum(row["capture_s"] for row in result):
                print(f"{prepared_by(model)} in {captured:.2f}s in all (in no decode's time)")
            rows += result if k is None else [{"shots": k, **row} for row in result]
        print(load_note(load.others()))
        if args.json:
            write_json(args.json, rows)
    return 0


def load_note(others: float | None) -> str:
    """What the machine's other processes did while the bench ran: with a core held, its figures are a busy
    machine's (core/threads.py sizes the decodes' thread team to the cores left)."""
    if others is None:
        return "other processes' load: not measured here (no /proc)"
    note = f"other processes kept {others:.2f} cores busy on average while this ran"
    if others >= BUSY:
        note += f" (warning: a busy machine; decodes ran on {TEAM.size} of {TEAM.most} threads at the end)"
    return note


def _lm_eval():
    """The lm-eval side of the package, imported only when asked for (lm-eval is not a runtime dependency)."""
    try:
        from evaluation import lm_eval_model
        from evaluation.tasks import lm_eval_export
    except ModuleNotFoundError as e:
        if e.name != "lm_eval" and not (e.name or "").startswith("lm_eval."):
            raise
        raise ValueError("lm-eval is not installed: pip install -r requirements-eval.txt") from None
    return lm_eval_model, lm_eval_export


def run_lm_eval(args: argparse.Namespace) -> int:
    lm_eval_model, _ = _lm_eval()
    return lm_eval_model.run_cli(args.args)


def run_lm_eval_task(args: argparse.Namespace) -> int:
    if not 1 <= args.n <= 1000:
        raise ValueError(f"--n must be in [1, 1000], got {args.n}")
    if not 0 <= args.shots <= 8:
        raise ValueError(f"--shots must be in [0, 8], got {args.shots}")
    check_writable(args.out, "--out", folder=True)
    _, lm_eval_export = _lm_eval()
    name = lm_eval_export.write_task(args.out, args.n, args.shots)
    print(f"wrote task {name} to {args.out}: lm-eval ... --include_path {args.out} --tasks {name} "
          f"--num_fewshot {args.shots}")
    return 0


def _print_forward_costs(model, length: int, row_counts: list[int], compile_mode: str) -> None:
    """Each row count's pass time, its share of the slowest and its ratio to the weight-read floor (the
    weights' bytes at the copy bandwidth measured now), eagerly and, where the passes compile, compiled."""
    paths = {"eager": forward_costs_as(model, length, row_counts, "off")}
    if compiles(compile_mode, model):
        costs = forward_costs_as(model, length, row_counts, compile_mode)
        if compile_state(model) == "compiled":
            paths["compiled"] = costs
        else:
            print(f"compiled: not measured, it runs {compile_state(model)}")
    nbytes = weight_bytes(model)
    bandwidth = copy_bandwidth(str(model.embed.weight.device))
    floor = nbytes / bandwidth
    print(f"weights read by every pass: {nbytes / 1e6:.1f} MB; copy bandwidth measured now: "
          f"{bandwidth / 1e9:.1f} GB/s, so reading them once (the floor) takes {floor * 1e3:.3f} ms")
    header = "".join(f" | {name} ms | share | / floor" for name in paths)
    print(f"rows of {length}{header}")
    for n in row_counts:
        cells = "".join(f" | {c[n] * 1e3:8.3f} | {c[n] / max(c.values()):.3f} | {c[n] / floor:6.2f}x"
                        for c in paths.values())
        print(f"{n:5d}{cells}")


def forward_costs_as(model, length: int, row_counts: list[int], compile_mode: str) -> dict[int, float]:
    """forward_costs with the model's passes compiled as `compile_mode` says (and left so)."""
    set_compile(model, compile_mode)
    return forward_costs(model, length, row_counts)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m evaluation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = ap.add_subparsers(dest="command", required=True, metavar="{generate,bench,lm-eval,lm-eval-task}")

    gen = commands.add_parser("generate", help="decode one prompt; print the answer and a one-line summary")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--policy", default="entropy", choices=sorted(POLICIES))
    add_decoding_args(gen, lists=False)
    gen.set_defaults(run=run_generate)

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
                       help=f"cache length for --forward-rows (default: {FORWARD_LENGTH}, a 4-shot prompt + gen 256)")
    bench.add_argument("--drift", action="store_true", help="instead: entropy-vs-drift correlation and volatility")
    add_decoding_args(bench, lists=True)
    bench.set_defaults(run=run_bench_command)

    ev = commands.add_parser("lm-eval", help="lm-evaluation-harness with our decoder as model `entropycache` "
                             "(needs requirements-eval.txt); every argument goes to lm-eval",
                             description="lm-eval's own command line, with the model `entropycache` registered "
                             "(evaluation/lm_eval_model.py); the speed summary follows lm-eval's table.")
    ev.set_defaults(run=run_lm_eval)  # main() hands everything after `lm-eval` to lm-eval unparsed

    task = commands.add_parser("lm-eval-task", help="write the held-out word problems as an lm-eval task folder")
    task.add_argument("--out", required=True, help="the folder to write (pass it to lm-eval as --include_path)")
    task.add_argument("--n", type=int, default=40, help="held-out problems")
    task.add_argument("--shots", type=int, default=0, help="worked examples before each problem")
    task.set_defaults(run=run_lm_eval_task)

    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lm-eval"] and not {"-h", "--help"} & set(argv[1:2]):
        args = argparse.Namespace(run=run_lm_eval, args=argv[1:])
    else:
        args = parser().parse_args(argv)
    try:
        return args.run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
