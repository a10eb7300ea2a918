"""Side-by-side benchmark of cache policies on held-out word problems.

    python -m core.bench --policies none,entropy,dual,periodic --n 50 --json out/bench.json
    python -m core.bench --policies none,entropy --tau 0.05,0.1,0.3,1,3 --n 50     # a tau sweep

All policies run in one process on the same prompts and seed, interleaved prompt by prompt (the
order rotates), so machine noise hits them alike. Times are the decoder's own per-step compute
times (model + token choice + decision, device-synchronised); prompt encoding and printing are
outside them. `ceiling` is the speedup a policy would reach if decode time were proportional to
rows computed: rows computed by `none` / rows computed by the policy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from core.cli_args import check_before_load, decode_config, torch_dtype
from core.decoder import DecodeConfig, decode, generate
from core.diagnostics import drift_vs_entropy, pearson, spearman, volatility_curve
from core.loading import answer_text, chat_prompt_ids, load_model
from core.policies import make_policy
from core.policies.entropy import DEFAULT_K, DEFAULT_TAU
from core.task import Problem, extract_answer, make_split


@dataclass(frozen=True)
class Contender:
    policy: str
    params: dict

    @property
    def label(self) -> str:
        return make_policy(self.policy, **self.params).describe()


@dataclass
class Tally:
    correct: int = 0
    same_tokens: int = 0
    all_tokens: int = 0
    compute_s: float = 0.0
    decision_s: float = 0.0
    steps: int = 0
    full_steps: int = 0
    rows_computed: int = 0
    rows_full: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class Progress:
    """Where a bench stands after one more decode."""

    decodes: int  # decodes finished, warm-up included
    total: int  # decodes in the whole bench: (warm-up + problems) x contenders
    problems: int  # problems finished; `rows` cover exactly these
    rows: list[dict]  # one per contender over the finished problems; [] before the first


def bench_progress(
    model,
    tokenizer,
    problems: list[Problem],
    contenders: list[Contender],
    config: DecodeConfig,
    warmup: int = 1,
) -> Iterator[Progress]:
    """Decode every problem with every contender, yielding a Progress after each decode; the last
    one's rows are the result, one per contender.

    The first contender is the reference for `agreement`, `speedup` and `ceiling` (normally none).
    A caller that stops iterating stops the bench between two decodes (the app's Stop button).
    """
    prompts = [chat_prompt_ids(tokenizer, p.prompt) for p in problems]
    warm = prompts[:warmup]
    total, done, rows = (len(warm) + len(prompts)) * len(contenders), 0, []
    for ids in warm:  # first calls allocate and tune kernels: keep them out of the timings
        for c in contenders:
            generate(model, ids, make_policy(c.policy, **c.params), config)
            done += 1
            yield Progress(done, total, 0, rows)
    tallies = [Tally() for _ in contenders]
    order = list(range(len(contenders)))
    for i, (problem, ids) in enumerate(zip(problems, prompts)):
        outputs = {}
        for j in order[i % len(order) :] + order[: i % len(order)]:
            last = generate(model, ids, make_policy(contenders[j].policy, **contenders[j].params), config)
            outputs[j] = last.tokens
            _add(tallies[j], last.totals, extract_answer(answer_text(tokenizer, last)) == problem.answer)
            done += 1
            if len(outputs) < len(contenders):
                yield Progress(done, total, i, rows)
        for j in order:
            tallies[j].same_tokens += sum(a == b for a, b in zip(outputs[j], outputs[0]))
            tallies[j].all_tokens += len(outputs[0])
        rows = [_row(c, t, tallies[0], i + 1) for c, t in zip(contenders, tallies)]
        yield Progress(done, total, i + 1, rows)


def run_bench(
    model,
    tokenizer,
    problems: list[Problem],
    contenders: list[Contender],
    config: DecodeConfig,
    warmup: int = 1,
    progress: bool = True,
) -> list[dict]:
    """bench_progress run to the end (with a progress bar of decodes on stderr): the result rows."""
    last = None
    with tqdm(desc="bench", unit="decode", disable=not progress) as bar:
        for last in bench_progress(model, tokenizer, problems, contenders, config, warmup):
            bar.total = last.total
            bar.update(1)
    return last.rows if last else []


def _add(t: Tally, totals, correct: bool) -> None:
    t.correct += correct
    t.compute_s += totals.compute_s
    t.decision_s += totals.decision_s
    t.steps += totals.steps
    t.full_steps += totals.full_steps
    t.rows_computed += totals.rows_computed
    t.rows_full += totals.rows_full
    t.tokens += totals.tokens


def _row(c: Contender, t: Tally, ref: Tally, n: int) -> dict:
    return {
        "policy": c.policy,
        "params": c.params,
        "label": c.label,
        "n": n,
        "accuracy": t.correct / n,
        "agreement": t.same_tokens / t.all_tokens,
        "speedup": ref.compute_s / t.compute_s,
        "ceiling": ref.rows_computed / t.rows_computed,
        "rows_fraction": t.rows_computed / t.rows_full,
        "full_steps_fraction": t.full_steps / t.steps,
        "decision_overhead": t.decision_s / t.compute_s,
        "tokens_per_s": t.tokens / t.compute_s,
        "steps": t.steps,
        "decode_s": t.compute_s,
    }


def contenders_from(policies: list[str], taus: list[float], k: int, prompt_every: int, response_every: int):
    out = []
    for name in policies:
        if name == "entropy":
            out += [Contender("entropy", {"tau": tau, "k": k}) for tau in taus]
        elif name == "periodic":
            out.append(Contender("periodic", {"prompt_every": prompt_every, "response_every": response_every}))
        else:
            out.append(Contender(name, {}))
    for c in out:
        make_policy(c.policy, **c.params)  # unknown names and bad parameters fail before any decoding
    return out


def format_table(rows: list[dict]) -> str:
    cols = [
        ("label", "policy", "{}"),
        ("accuracy", "acc", "{:.3f}"),
        ("agreement", "agree", "{:.3f}"),
        ("speedup", "speedup", "{:.2f}x"),
        ("ceiling", "ceiling", "{:.2f}x"),
        ("rows_fraction", "rows", "{:.3f}"),
        ("full_steps_fraction", "full", "{:.3f}"),
        ("decision_overhead", "decision", "{:.2%}"),
        ("tokens_per_s", "tok/s", "{:.1f}"),
    ]
    cells = [[h for _, h, _ in cols]] + [[fmt.format(r[k]) for k, _, fmt in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = [" | ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def sweep_contenders(taus: list[float], ks: list[int]) -> list[Contender]:
    """The exact decoder (the reference) then EntropyCache at every (tau, k) of the grid."""
    contenders = [Contender("none", {})] + [Contender("entropy", {"tau": t, "k": k}) for t in taus for k in ks]
    for c in contenders:
        make_policy(c.policy, **c.params)  # bad tau/k fail before any decoding
    return contenders


def sweep_progress(
    model, tokenizer, problems: list[Problem], taus: list[float], ks: list[int], config: DecodeConfig, warmup: int = 1
) -> Iterator[Progress]:
    """A tau x k grid of EntropyCache against the exact decoder in one interleaved bench run,
    followed decode by decode (see bench_progress): the app's Sweep tab streams these."""
    yield from bench_progress(model, tokenizer, problems, sweep_contenders(taus, ks), config, warmup)


def sweep(
    model, tokenizer, problems: list[Problem], taus: list[float], ks: list[int], config: DecodeConfig, warmup: int = 1
) -> list[dict]:
    """sweep_progress run to the end: one row for `none`, then one per (tau, k)."""
    return run_bench(model, tokenizer, problems, sweep_contenders(taus, ks), config, warmup, progress=False)


def drift_report(model, tokenizer, problems: list[Problem], contender: Contender, config: DecodeConfig) -> dict:
    """Observation 1 and 2 pooled over problems: entropy-vs-drift correlations and the volatility curve."""
    events_all, pairs = [], {"entropy": [], "drift_cos": [], "drift_l2": []}
    for problem in problems:
        ids = chat_prompt_ids(tokenizer, problem.prompt)
        events = list(decode(model, ids, make_policy(contender.policy, **contender.params), config, probe=True))
        one = drift_vs_entropy(events)
        for key in pairs:
            pairs[key] += one[key]
        events_all += events
    return {
        "n_pairs": len(pairs["entropy"]),
        "pearson_cos": pearson(pairs["entropy"], pairs["drift_cos"]),
        "spearman_cos": spearman(pairs["entropy"], pairs["drift_cos"]),
        "pearson_l2": pearson(pairs["entropy"], pairs["drift_l2"]),
        "spearman_l2": spearman(pairs["entropy"], pairs["drift_l2"]),
        "volatility": volatility_curve(events_all),
    }


def forward_costs(model, length: int, row_counts: list[int], repeats: int = 30) -> dict[int, float]:
    """Seconds per forward computing n rows of a cache of `length` positions, n in row_counts
    (n >= length means a full forward). Shows how far a partial pass is from costing n / length."""
    device = model.embed.weight.device
    ids = torch.randint(0, model.config.vocab_size, (1, length), device=device)
    cache = model.new_cache(1, length)
    out = {}
    with torch.no_grad():
        for n in row_counts:
            rows = None if n >= length else torch.arange(length - n, length, device=device)
            x = ids if rows is None else ids[:, rows]
            for _ in range(3):
                model(x, cache, rows, torch.tensor([length - 1], device=device))
            _sync_device(device)
            t0 = time.perf_counter()
            for _ in range(repeats):
                model(x, cache, rows, torch.tensor([length - 1], device=device))
            _sync_device(device)
            out[n] = (time.perf_counter() - t0) / repeats
    return out


def weight_bytes(model) -> int:
    """Bytes of weights every forward reads, however few rows it computes: all parameters but the
    input embedding table, of which a pass reads only its rows' entries (unless tied to the head).
    Divided by the time of a pass over a few rows, it is the memory bandwidth such a pass needs."""
    tied = model.lm_head.weight is model.embed.weight
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if tied or n != "embed.weight")


def _sync_device(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _row_counts(text: str, length: int) -> list[int]:
    """--forward-rows as positive integers (a count >= length times a full forward)."""
    if length < 1:
        raise ValueError(f"--length must be a positive integer, got {length}")
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--forward-rows must be a comma list of integers, got {text!r}") from None
    if min(counts) < 1:
        raise ValueError(f"--forward-rows counts must be at least 1, got {min(counts)}")
    return counts


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint folder or hub id (default: the embedded model)")
    ap.add_argument("--policies", default="none,entropy,dual,periodic", help="comma list; the first is the reference")
    ap.add_argument("--tau", default=str(DEFAULT_TAU), help="entropy threshold(s), comma list for a sweep")
    ap.add_argument("-k", type=int, default=DEFAULT_K)
    ap.add_argument("--prompt-every", type=int, default=50)
    ap.add_argument("--response-every", type=int, default=5)
    ap.add_argument("--n", type=int, default=50, help="held-out problems")
    ap.add_argument("--gen-len", type=int, default=None, help="response length (default: the model's)")
    ap.add_argument("--block", type=int, default=None, help="block length (default: the model's)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threshold", type=float, default=None, help="parallel decoding confidence threshold")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the result rows here")
    ap.add_argument("--forward-rows", default=None, help="instead: time one forward per row count, e.g. 108,18,2")
    ap.add_argument("--length", type=int, default=108, help="cache length for --forward-rows")
    ap.add_argument("--drift", action="store_true", help="instead: entropy-vs-drift correlation and volatility curve")
    args = ap.parse_args(argv)
    try:
        if not 1 <= args.n <= 1000:
            raise ValueError(f"--n must be in [1, 1000], got {args.n}")
        contenders = contenders_from(
            args.policies.split(","), _floats(args.tau), args.k, args.prompt_every, args.response_every
        )
        check_before_load(args.gen_len, args.block, steps=args.steps, threshold=args.threshold)
        row_counts = _row_counts(args.forward_rows, args.length) if args.forward_rows else []
        model, tokenizer = load_model(args.model, device=args.device, dtype=torch_dtype(args.dtype))
        config = decode_config(model, args.gen_len, args.block, steps=args.steps, threshold=args.threshold)
        config.validate()
        if args.forward_rows:
            costs = forward_costs(model, args.length, row_counts)
            full, mb = max(costs.values()), weight_bytes(model) / 1e6
            print(f"weights read by every pass: {mb:.1f} MB")
            for n, s in costs.items():
                print(
                    f"{n:5d} rows of {args.length}: {s * 1000:8.2f} ms  ({s / full:.2f} of the slowest; "
                    f"weights alone would need {mb / 1e3 / s:5.1f} GB/s)"
                )
            return 0
        if args.drift:
            if len(contenders) != 1:
                raise ValueError("--drift probes one policy: pass exactly one, e.g. --policies entropy --tau 0.5")
            report = drift_report(model, tokenizer, make_split("test", args.n), contenders[0], config)
            curve = report.pop("volatility")
            print(f"policy: {contenders[0].label}")
            print(json.dumps(report, indent=1))
            print("K/V change by steps since unmasked:", {a: round(v, 4) for a, v in list(curve.items())[:12]})
            return 0
        rows = run_bench(model, tokenizer, make_split("test", args.n), contenders, config, warmup=args.warmup)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
