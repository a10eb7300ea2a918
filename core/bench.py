"""Side-by-side benchmark of cache policies on held-out word problems (`python -m core bench`).

All policies run in one process on the same prompts and seed, interleaved prompt by prompt (the
order rotates), so machine noise hits them alike. Times are the decoder's own per-step compute
times (model + token choice + decision, device-synchronised); prompt encoding and printing are
outside them. `ceiling` is the speedup a policy would reach if decode time were proportional to
rows computed: rows computed by the reference / rows computed by the policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

from tqdm import tqdm

from core.decoder import DecodeConfig, generate
from core.events import Totals
from core.loading import answer_text, chat_prompt_ids
from core.policies import POLICIES, make_policy
from core.tasks.word_problems import Problem, extract_answer


@dataclass(frozen=True)
class Contender:
    policy: str
    params: dict

    @property
    def label(self) -> str:
        return make_policy(self.policy, **self.params).describe()


@dataclass
class Tally:
    """One contender's sums over the problems decoded so far."""

    correct: int = 0
    same_tokens: int = 0  # response tokens equal to the reference's
    all_tokens: int = 0
    totals: Totals = field(default_factory=Totals)  # the decoder's own totals, summed


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
            tallies[j].totals += last.totals
            tallies[j].correct += extract_answer(answer_text(tokenizer, last)) == problem.answer
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


def _row(c: Contender, tally: Tally, ref: Tally, n: int) -> dict:
    t, agreement = tally.totals, tally.same_tokens / tally.all_tokens
    return {
        "policy": c.policy,
        "params": c.params,
        "label": c.label,
        "n": n,
        "accuracy": tally.correct / n,
        "agreement": agreement,
        "speedup": ref.totals.compute_s / t.compute_s,
        "ceiling": ref.totals.rows_computed / t.rows_computed,
        "rows_fraction": t.rows_fraction,
        "full_steps_fraction": t.full_steps / t.steps,
        "decision_overhead": t.decision_s / t.compute_s,
        "tokens_per_s": t.tokens_per_s,
        "steps": t.steps,
        "decode_s": t.compute_s,
    }


def contenders_from(policies: list[str], values: dict[str, list]) -> list[Contender]:
    """One contender per policy and combination of the listed values of the parameters it declares
    (a parameter not listed keeps its default). Unknown policies and bad values fail here, before
    any model work."""
    out = []
    for name in policies:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}")
        names = [p.name for p in POLICIES[name].parameters if p.name in values]
        for combo in product(*(values[n] for n in names)):
            out.append(Contender(name, dict(zip(names, combo))))
            make_policy(name, **out[-1].params)
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
    return contenders_from(["none", "entropy"], {"tau": taus, "k": ks})


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

