"""Side-by-side benchmark of cache policies on held-out task items (`python -m evaluation bench`).

All policies run in one process on the same prompts and seed, interleaved prompt by prompt (the
order rotates), so machine noise hits them alike. Times are the decoder's own per-step compute
times (model + token choice + decision, on the step clock of core/device.py); prompt encoding and
printing are outside them. `ceiling` is the speedup a policy would reach if decode time were
proportional to rows computed: rows computed by the reference / rows computed by the policy.

Entropy columns describe the per-step max entropy of the decoded tokens (the number EntropyCache
decides on): its median, 90th percentile and maximum over every step. Full steps are split into
`forced` (a block's first step) and `entropy` (every other full step: for EntropyCache, a decoded
token above tau). With a confidence threshold, the bench also runs the one-token-per-step exact
decoder on the same prompts (a contender of its own) and reports every policy's
`speedup_vs_vanilla` against it. On stories, `repeats` is the share of their events that repeat an
earlier one (evaluation.tasks.story_checker.repeated_events): a story that loops passes the checker.

Each row also keeps what it decoded, prompt by prompt (`per_prompt`): the text and its tokens, the
per-prompt measures (right or not, agreement, first divergence from the reference) and the steps the
policy made full. `agreement` counts every generated position, the masks decoded after an end-of-text
too; `agreement_in_text` only the reference's answer (its tokens before its end-of-text), what a
reader sees. `accuracy` is over the prompts with a known answer (None when none has one: prompts
of one's own); `first_divergence_median` is over every prompt. The CLI's `--json` and the app's Sweep
tab read the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import product

from tqdm import tqdm

from core.config import DecodeConfig
from core.decoder import decode
from core.events import StepEvent, Totals
from core.loading import answer_text, chat_prompt_ids
from core.policies import POLICIES, make_policy
from evaluation.tasks import Item, is_correct, repeats


@dataclass(frozen=True)
class Contender:
    policy: str
    params: dict
    one_token_per_step: bool = False  # decode without the run's threshold or steps (the vanilla decoder)

    @property
    def label(self) -> str:
        label = make_policy(self.policy, **self.params).describe()
        return f"{label} (one token per step)" if self.one_token_per_step else label

    def config(self, run: DecodeConfig) -> DecodeConfig:
        return run.one_token_per_step() if self.one_token_per_step else run


VANILLA = Contender("none", {}, one_token_per_step=True)


@dataclass
class Tally:
    """One contender's sums over the problems decoded so far, and what it decoded for each (the
    per-prompt measures: grades, answers, forced full steps, are summed from `per_prompt`)."""

    same_tokens: int = 0  # response tokens equal to the reference's
    all_tokens: int = 0
    totals: Totals = field(default_factory=Totals)  # the decoder's own totals, summed
    max_entropies: list[float] = field(default_factory=list)  # per step
    layer_rows: list[int] = field(default_factory=list)  # rows computed at each layer, summed over steps
    layer_rows_full: int = 0  # what one layer computes in full forwards at every step
    prompt_tokens: int = 0  # summed over the problems
    per_prompt: list[dict] = field(default_factory=list)  # one record per problem (compared_record)

    def add(self, events: list[StepEvent]) -> None:
        self.totals += events[-1].totals
        self.max_entropies += [e.max_entropy for e in events]
        per_layer = [sum(col) for col in zip(*(e.layer_rows for e in events))]
        self.layer_rows = [a + b for a, b in zip(self.layer_rows, per_layer)] if self.layer_rows else per_layer
        self.layer_rows_full += sum(e.prompt_len + len(e.tokens) for e in events)
        self.prompt_tokens += events[0].prompt_len


def full_steps(events: list[StepEvent]) -> tuple[list[int], list[int]]:
    """The full steps of one decode: (forced: those that open a block, by entropy: every other one)."""
    opens = [i == 0 or events[i - 1].block != e.block for i, e in enumerate(events)]
    forced = [e.step for e, first in zip(events, opens) if e.full and first]
    return forced, [e.step for e, first in zip(events, opens) if e.full and not first]


def first_divergence(reference: list[int], tokens: list[int]) -> int:
    """How far `tokens` match `reference` from the start: the position of the first token where they
    part (a missing token counts), or the reference's length when they are the same."""
    for i, (a, b) in enumerate(zip(reference, tokens)):
        if a != b:
            return i
    return min(len(reference), len(tokens))


def decoded_record(item: Item, events: list[StepEvent], tokenizer) -> dict:
    """What one decode of one problem gave: its answer (text and tokens before the end-of-text), whether
    it is right (None: no known answer) and the steps it made full."""
    forced, by_entropy = full_steps(events)
    last, text = events[-1], answer_text(tokenizer, events[-1])
    repeated, told = repeats(item, text)
    return {"prompt": item.prompt, "text": text, "tokens": last.tokens[: last.totals.tokens],
            "correct": is_correct(item, text), "repeated_events": repeated, "events": told, "steps": len(events),
            "full_steps_forced_at": forced, "full_steps_entropy_at": by_entropy}


def matched_positions(reference: list[int], tokens: list[int]) -> int:
    """How many of `reference`'s tokens `tokens` has at the same position (a shorter list misses the
    rest): over whole outputs, agreement's count; over answers, agreement in text's."""
    return sum(a == b for a, b in zip(reference, tokens))


def compared_record(record: dict, reference: dict, agreement: float) -> dict:
    """A decoded_record with its per-prompt measures against the reference's record of the same prompt."""
    ref = reference["tokens"]
    in_text = matched_positions(ref, record["tokens"]) / len(ref) if ref else None  # None: an empty answer
    return record | {"agreement": agreement, "agreement_in_text": in_text, "identical": record["tokens"] == ref,
                     "first_divergence": first_divergence(ref, record["tokens"])}


@dataclass(frozen=True)
class Progress:
    """Where a bench stands after one more decode."""

    decodes: int  # decodes finished, warm-up included
    total: int  # decodes in the whole bench: (warm-up + problems) x contenders
    problems: int  # problems finished; `rows` cover exactly these
    rows: list[dict]  # one per contender over the finished problems; [] before the first
    warmup: int = 0  # of `total`, the warm-up's decodes (first, untimed)


def bench_progress(
    model,
    tokenizer,
    items: list[Item],
    contenders: list[Contender],
    config: DecodeConfig,
    warmup: int = 1,
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> Iterator[Progress]:
    """Decode every item with every contender, yielding a Progress after each decode; the last
    one's rows are the result, one per contender. `prompt_ids`: each item's prompt as the model reads
    it (core.loading.chat_prompt_ids), where the caller has tokenized it already (the app's Sweep);
    None: tokenized here.

    The first contender is the reference for `agreement`, `speedup` and `ceiling` (normally none).
    With a threshold in `config`, the one-token-per-step exact decoder is added (if not there) for
    `speedup_vs_vanilla`. A caller that stops iterating stops the bench between two decodes (the
    app's Stop button).
    """
    if config.threshold is not None and VANILLA not in contenders:
        contenders = [*contenders, VANILLA]
    prompts = [chat_prompt_ids(tokenizer, item.prompt) for item in items] if prompt_ids is None else [
        list(ids) for ids in prompt_ids]
    warm = prompts[:warmup]
    total, done, rows = (len(warm) + len(prompts)) * len(contenders), 0, []
    untimed = len(warm) * len(contenders)
    for ids in warm:  # first calls allocate and tune kernels: keep them out of the timings
        for c in contenders:
            _events(model, ids, c, config)
            done += 1
            yield Progress(done, total, 0, rows, untimed)
    tallies = [Tally() for _ in contenders]
    order = list(range(len(contenders)))
    for i, (item, ids) in enumerate(zip(items, prompts)):
        outputs, records = {}, {}
        for j in order[i % len(order) :] + order[: i % len(order)]:
            events = _events(model, ids, contenders[j], config)
            outputs[j], records[j] = events[-1].tokens, decoded_record(item, events, tokenizer)
            tallies[j].add(events)
            done += 1
            if len(outputs) < len(contenders):
                yield Progress(done, total, i, rows, untimed)
        for j in order:
            same = matched_positions(outputs[0], outputs[j])
            tallies[j].same_tokens += same
            tallies[j].all_tokens += len(outputs[0])
            tallies[j].per_prompt.append(compared_record(records[j], records[0], same / len(outputs[0])))
        vanilla = tallies[contenders.index(VANILLA)] if VANILLA in contenders else None
        rows = [_row(c, t, tallies[0], i + 1, vanilla) for c, t in zip(contenders, tallies)]
        yield Progress(done, total, i + 1, rows, untimed)


def _events(model, ids: list[int], c: Contender, config: DecodeConfig) -> list[StepEvent]:
    return list(decode(model, ids, make_policy(c.policy, **c.params), c.config(config)))


def bench_rows(progress: Iterable[Progress], bar: bool = True) -> list[dict]:
    """A bench (bench_progress, sweep_progress) followed to the end, with a progress bar of decodes on
    stderr: its result rows."""
    last = None
    with tqdm(desc="bench", unit="decode", disable=not bar) as shown:
        for last in progress:
            shown.total = last.total
            shown.update(1)
    return last.rows if last else []


def _row(c: Contender, tally: Tally, ref: Tally, n: int, vanilla: Tally | None) -> dict:
    t, agreement = tally.totals, tally.same_tokens / tally.all_tokens
    entropies = sorted(tally.max_entropies)
    graded = [r["correct"] for r in tally.per_prompt if r["correct"] is not None]  # problems with a known answer
    forced = sum(len(r["full_steps_forced_at"]) for r in tally.per_prompt)
    answers = [(mine["tokens"], theirs["tokens"]) for mine, theirs in zip(tally.per_prompt, ref.per_prompt)]
    in_text = sum(len(reference) for _, reference in answers)
    row = {
        "policy": c.policy,
        "params": c.params,
        "label": c.label,
        "n": n,
        "prompt_len": tally.prompt_tokens / n,
        "accuracy": sum(graded) / len(graded) if graded else None,  # None: no known answers
        "repeat_share": _share(tally.per_prompt, "repeated_events", "events"),  # stories only, else None
        "agreement": agreement,
        "agreement_in_text": sum(matched_positions(r, m) for m, r in answers) / in_text if in_text else None,
        "first_divergence_median": _quantile(sorted(r["first_divergence"] for r in tally.per_prompt), 0.5),
        "speedup": ref.totals.compute_s / t.compute_s,
        "ceiling": ref.totals.rows_computed / t.rows_computed,
        "rows_fraction": t.rows_fraction,
        "full_steps_fraction": t.full_steps / t.steps,
        "full_steps_forced": forced / t.steps,
        # full steps beyond a block's first, for a policy that takes them by entropy (None: another policy)
        "full_steps_entropy": (t.full_steps - forced) / t.steps if POLICIES[c.policy].decides_by_entropy else None,
        "entropy_p50": _quantile(entropies, 0.5),
        "entropy_p90": _quantile(entropies, 0.9),
        "entropy_max": entropies[-1],
        "layer_rows_fraction": [r / tally.layer_rows_full for r in tally.layer_rows],
        "decision_overhead": t.decision_s / t.compute_s,
        "decision_us_per_step": t.decision_s / t.steps * 1e6,
        "tokens_per_s": t.tokens_per_s,
        "steps": t.steps,
        "decode_s": t.compute_s,
        "capture_s": t.capture_s,  # CUDA graphs captured on first use (core/passes.py): not in decode_s
    }
    if vanilla is not None:
        row["speedup_vs_vanilla"] = vanilla.totals.compute_s / t.compute_s
    row["per_prompt"] = list(tally.per_prompt)  # last: the table and the sweep's CSV of points leave it out
    return row


def _share(records: list[dict], part: str, whole: str) -> float | None:
    """sum(part) / sum(whole) over the per-prompt records; None when the whole is 0."""
    total = sum(r[whole] for r in records)
    return sum(r[part] for r in records) / total if total else None


def _quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values (linear interpolation between the two nearest)."""
    x = q * (len(ordered) - 1)
    lo = int(x)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (x - lo)


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
        ("agreement_in_text", "in text", "{:.3f}"),
        ("first_divergence_median", "1st div", "{:g}"),
        ("speedup", "speedup", "{:.2f}x"),
        ("ceiling", "ceiling", "{:.2f}x"),
        ("rows_fraction", "rows", "{:.3f}"),
        ("full_steps_fraction", "full", "{:.3f}"),
        ("full_steps_entropy", "by entropy", "{:.3f}"),
        ("entropy_p50", "H p50", "{:.3f}"),
        ("entropy_p90", "H p90", "{:.3f}"),
        ("decision_overhead", "decision", "{:.2%}"),
        ("decision_us_per_step", "us/step", "{:.0f}"),
        ("tokens_per_s", "tok/s", "{:.1f}"),
    ]
    if rows and "speedup_vs_vanilla" in rows[0]:
        cols.insert(5, ("speedup_vs_vanilla", "vs vanilla", "{:.2f}x"))  # after speedup
    if rows and rows[0]["repeat_share"] is not None:  # a task with stories: beside the checker's pass
        cols.insert(2, ("repeat_share", "repeats", "{:.3f}"))
    cells = [[h for _, h, _ in cols]] + [["-" if r[k] is None else fmt.format(r[k]) for k, _, fmt in cols]
                                         for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = [" | ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def sweep_contenders(taus: list[float], ks: list[int], scope: str = "block") -> list[Contender]:
    """The exact decoder (the reference) then EntropyCache at every (tau, k) of the grid, its partial steps
    recomputing the masked rows of `scope` (the block's or the response's)."""
    return contenders_from(["none", "entropy"], {"tau": taus, "k": ks, "scope": [scope]})


def sweep_progress(
    model, tokenizer, items: list[Item], taus: list[float], ks: list[int], config: DecodeConfig, warmup: int = 1,
    scope: str = "block", prompt_ids: Sequence[Sequence[int]] | None = None,
) -> Iterator[Progress]:
    """A tau x k grid of EntropyCache against the exact decoder in one interleaved bench run,
    followed decode by decode (see bench_progress): the app's Sweep tab streams these."""
    yield from bench_progress(model, tokenizer, items, sweep_contenders(taus, ks, scope), config, warmup, prompt_ids)


def sweep(
    model, tokenizer, items: list[Item], taus: list[float], ks: list[int], config: DecodeConfig, warmup: int = 1,
    scope: str = "block",
) -> list[dict]:
    """sweep_progress run to the end: one row for `none`, then one per (tau, k)."""
    return bench_rows(sweep_progress(model, tokenizer, items, taus, ks, config, warmup, scope), bar=False)

