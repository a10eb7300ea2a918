"""`python -m evaluation bench`: policies side by side on held-out items or your prompts, interleaved
(evaluation/bench.py), a context sweep over --shots, or instead the drift report (--drift) or one
forward's cost by rows computed (--forward-rows, evaluation/cli/forward_rows.py). Its flags are
checked, and the prompts against the model's positions, before the weights load."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.compiled import compile_state
from core.config import DecodeConfig
from core.few_rows import few_rows_state
from core.loading import chat_prompt_ids, load_tokenizer, read_config, resolve
from core.threads import BUSY, TEAM, CoreLoad
from core.warmup import prepared_by
from evaluation.bench import bench_progress, bench_rows, contenders_from, format_table
from evaluation.cli import forward_rows
from evaluation.cli.flags import decode_settings, int_list, load_from_flags, refuse_unused, value_lists
from evaluation.diagnostics import drift_report, format_drift
from evaluation.outputs import check_writable, write_json
from evaluation.tasks import held_out, own_items, prompt_lines


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
        shots = int_list("0" if args.shots is None else args.shots, "--shots", 0)
        return {k: held_out(bench_task(args), n, k) for k in shots}, []
    given = [flag for flag in ("task", "n", "shots") if getattr(args, flag) is not None]
    if given:
        raise ValueError(f"--prompts decodes the file's prompts: leave out --{', --'.join(given)}")
    lines = read_prompts(args.prompts)
    return {None: own_items([prompt for _, prompt in lines])}, [f"--prompts line {n}" for n, _ in lines]


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


def run(args: argparse.Namespace) -> int:
    if args.warmup < 0:
        raise ValueError(f"--warmup must be a non-negative integer, got {args.warmup}")
    if args.json is not None:
        check_writable(args.json, "--json")
    items, names = bench_items(args)
    shots = list(items)
    policies, values = args.policies.split(","), value_lists(args)
    contenders = contenders_from(policies, values)
    refuse_unused(values, policies)
    if args.drift and len(contenders) != 1:
        raise ValueError("--drift probes one policy: pass exactly one, e.g. --policies entropy --tau 1")
    settings = decode_settings(args)
    row_counts, length = forward_rows.row_counts(args)
    if not row_counts:
        prompts = [item.prompt for some in items.values() for item in some]
        check_prompts_fit(args.model, prompts, settings.get("gen_len"), names)
    if (row_counts or args.drift) and len(shots) > 1:
        raise ValueError("--shots takes one count with --forward-rows or --drift")
    model, tokenizer = load_from_flags(args)
    task = bench_task(args)
    config = DecodeConfig.for_model(model.config, task=task, **settings)  # with the task's declared settings
    if row_counts:
        forward_rows.print_forward_costs(model, length, row_counts, args.compile)
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
        if compile_state(model) == "compiled":
            print(f"passes over few rows: {few_rows_state(model)}")
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
