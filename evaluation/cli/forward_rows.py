"""`python -m evaluation bench --forward-rows`: one forward's time by rows computed, eagerly and, where
the passes compile, on the fast path (and, where the few-row kernel runs, beside it every pass a
compiled graph, with the kernel's products and with ATen's), each against its two floors
(evaluation/forward_cost.py): reading the weights once, and doing its arithmetic at the rate this
device reaches on a large product."""

from __future__ import annotations

import argparse

from core import few_rows
from core.compiled import compile_state, compiles, set_compile
from core.loading import read_config, resolve
from evaluation.cli.flags import int_list
from evaluation.forward_cost import arithmetic_floor_s, copy_bandwidth, forward_costs, gemm_rate, weight_bytes

FORWARD_LENGTH = 601  # bench --forward-rows: a 4-shot word problem and a 256-token canvas


def row_counts(args: argparse.Namespace) -> tuple[list[int], int]:
    """--forward-rows as positive integers (a count >= the length times a full forward) and --length,
    checked against the model's positions in its config.json (a longer cache is none it decodes with);
    no counts without --forward-rows."""
    if args.forward_rows is None:
        if args.length is not None:
            raise ValueError("--length is the cache length of --forward-rows: pass it with --forward-rows")
        return [], 0
    counts = int_list(args.forward_rows, "--forward-rows", 1)
    length = FORWARD_LENGTH if args.length is None else args.length
    if length < 1:
        raise ValueError(f"--length must be a positive integer, got {length}")
    cfg, _, _ = read_config(resolve(args.model))
    if length > cfg.max_seq_len:
        raise ValueError(f"--length {length} exceeds the model's {cfg.max_seq_len} positions")
    return counts, length


def print_forward_costs(model, length: int, row_counts: list[int], compile_mode: str) -> None:
    """Each row count's pass time, its share of the slowest and its ratios to the two floors, eagerly and,
    where the passes compile, on the fast path, and where the few-row kernel runs (core/few_rows.py)
    every pass a compiled graph beside it, with the kernel's products and with ATen's: the weight-read
    floor (the float32 weights' bytes at the copy bandwidth measured now) and the arithmetic floor (the
    pass's FLOPs at the rate a large product reaches now)."""
    paths = {"eager": forward_costs_as(model, length, row_counts, "off")}
    if compiles(compile_mode, model):
        costs = forward_costs_as(model, length, row_counts, compile_mode)
        if compile_state(model) == "compiled":
            paths["fast path"] = costs
            print(f"fast path: passes compiled, over few rows {few_rows.few_rows_state(model)}")
            if few_rows.attached(model):
                paths["compiled graphs"] = graphs_costs(model, length, row_counts)
                paths["compiled, ATen products"] = aten_products_costs(model, length, row_counts)
        else:
            print(f"compiled: not measured, it runs {compile_state(model)}")
    nbytes = weight_bytes(model)
    bandwidth = copy_bandwidth(str(model.embed.weight.device))
    floor = nbytes / bandwidth
    rate = gemm_rate(model, length)
    arithmetic = {n: arithmetic_floor_s(model.config, min(n, length), length, 1, rate) for n in row_counts}
    print(f"weights read by every pass: {nbytes / 1e6:.1f} MB; copy bandwidth measured now: "
          f"{bandwidth / 1e9:.1f} GB/s, so reading them once (the floor) takes {floor * 1e3:.3f} ms")
    print(f"the widest product of a full pass runs at {rate / 1e9:.0f} GFLOP/s now: a pass's FLOPs at that rate "
          "(arith) is what no pass in this dtype beats")
    header = "".join(f" | {name} ms | share | / floor | / arith" for name in paths)
    print(f"rows of {length} | arith ms{header}")
    for n in row_counts:
        cells = "".join(f" | {c[n] * 1e3:8.3f} | {c[n] / max(c.values()):.3f} | {c[n] / floor:6.2f}x"
                        f" | {c[n] / arithmetic[n]:6.2f}x" for c in paths.values())
        print(f"{n:5d} | {arithmetic[n] * 1e3:8.3f}{cells}")


def graphs_costs(model, length: int, row_counts: list[int]) -> dict[int, float]:
    """forward_costs with every pass a compiled graph: the pass in one call set aside (the kernel's
    products kept), and put back after."""
    stack, model.pass_over_rows = model.pass_over_rows, None
    try:
        return forward_costs(model, length, row_counts)
    finally:
        model.pass_over_rows = stack


def aten_products_costs(model, length: int, row_counts: list[int]) -> dict[int, float]:
    """forward_costs of the compiled passes with ATen's products in the kernel's place, the kernel attached
    again after."""
    few_rows.detach(model)
    try:
        return forward_costs(model, length, row_counts)
    finally:
        few_rows.attach(model)


def forward_costs_as(model, length: int, row_counts: list[int], compile_mode: str) -> dict[int, float]:
    """forward_costs with the model's passes compiled as `compile_mode` says (and left so)."""
    set_compile(model, compile_mode)
    return forward_costs(model, length, row_counts)
