"""Diagnostics behind the paper's two observations, measured on the model being shown.

1. Drift, as the paper means it: what a step's decode does to the K/V. At the start of step t the
   probe runs a full forward of the current tokens; each row's relative change from the same
   forward at the start of step t-1 is what step t-1's decode moved it (`kv_change`), whatever the
   policy does with its cache. It is set beside the max entropy of the tokens step t-1 decoded (what
   EntropyCache decides on), split into the rows step t recomputes and the rows it reuses: the
   second is what the cache risks. Apart from it, the *staleness* of the policy's own cache (its K/V
   against the fresh ones, per layer, as 1 - cosine and relative L2), which piles up over the
   partial steps since the last full one and is plotted against them, not against entropy.
   Two kinds of step pair are marked apart, decided before any measurement: those after an
   end-of-text was decoded (the masks after it are settled text that no partial step recomputes)
   and those into a block's first step (forced full whatever the entropy). Correlations are given
   with and without them.
2. Volatility: how much a token's fresh K/V still changes from one step to the next, as a
   function of how many steps ago it was unmasked: the curve behind recomputing the k most recent.

`decode(..., before_step=Probe(model))` fills the event fields these read; it costs one extra full
forward per step, which runs before the step's timing starts and so is not in its compute time.
`drift_report` pools both over many prompts (`python -m evaluation bench --drift`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import torch

from core.config import DecodeConfig
from core.decoder import decode
from core.kv_cache import KVCache
from core.loading import chat_prompt_ids
from core.model import DiffusionTransformer
from core.policies import StepContext, make_policy
from evaluation.correlation import pearson, spearman


class Probe:
    """A decode hook: fresh K/V of every row at the start of each step, against the cache (its
    staleness: drift_cos, drift_l2) and against the fresh K/V of the step before (drift as the paper
    means it, kv_change; and volatility, by steps since unmasking). One per decode."""

    def __init__(self, model: DiffusionTransformer) -> None:
        self.model = model
        self.previous: KVCache | None = None
        self.seen: torch.Tensor | None = None  # the tokens at the previous call
        self.unmasked_at: dict[int, int] = {}

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, cache: KVCache, ctx: StepContext) -> dict:
        if self.seen is not None:  # positions unmasked since the last call were unmasked by the step before
            mask_id = self.model.config.mask_token_id
            for pos in ((self.seen == mask_id) & (x != mask_id)).nonzero().flatten().tolist():
                self.unmasked_at[pos] = ctx.step - 1
        self.seen = x.clone()
        fresh = self.model.new_cache(1, cache.length)
        self.model(x[None], fresh, None, x.new_zeros(1))  # K/V of every row; one logit row, unused
        out = {}
        if ctx.step > 0:  # before the first step there is no cache to be stale
            out["drift_cos"], out["drift_l2"] = kv_drift(cache, fresh)
        if self.previous is not None:
            change = row_change(self.previous, fresh).tolist()
            out["kv_change"] = change
            out["volatility"] = [[ctx.step - s, change[pos]] for pos, s in sorted(self.unmasked_at.items())]
        self.previous = fresh
        return out


def kv_drift(stale: KVCache, fresh: KVCache) -> tuple[list[float], list[float]]:
    """Per layer: mean over rows of 1 - cosine(stale row, fresh row), and ||stale - fresh|| / ||fresh||.

    A row is a position's keys and values of all heads, concatenated."""
    cos, l2 = [], []
    for layer in range(fresh.n_layers):
        s, f = _rows(stale, layer), _rows(fresh, layer)
        cos.append(float((1 - torch.nn.functional.cosine_similarity(s, f, dim=-1)).mean()))
        l2.append(float((s - f).norm() / f.norm().clamp_min(1e-12)))
    return cos, l2


def row_change(previous: KVCache, current: KVCache) -> torch.Tensor:
    """Per position: relative L2 change of its K/V between two caches, averaged over layers."""
    changes = []
    for layer in range(current.n_layers):
        p, c = _rows(previous, layer), _rows(current, layer)
        changes.append(
            ((c - p).norm(dim=-1) / p.norm(dim=-1).clamp_min(1e-12)).cpu()
        )  # layers may sit on several devices
    return torch.stack(changes).mean(dim=0)


def _rows(cache: KVCache, layer: int) -> torch.Tensor:
    """[length, 2 * heads * head_dim] float32 rows of one layer (batch 0)."""
    k, v = cache.k[layer][0], cache.v[layer][0]  # [heads, length, head_dim]
    return torch.cat([k, v], dim=0).transpose(0, 1).reshape(k.shape[1], -1).float()


@dataclass(frozen=True)
class StepPair:
    """Step t-1's decode and what it did, measured at the start of step t."""

    step: int  # t
    entropy: float  # max entropy of the tokens step t-1 decoded
    change: float  # mean K/V change of every row
    recomputed: float  # mean change of the rows step t computes (every row when step t is full)
    reused: float | None  # of the rows it reuses from the cache; None: step t is full, it reuses none
    full: bool  # step t computes every row
    staleness: float  # the cache against the fresh K/V: relative L2, mean over layers
    since_full: int | None  # steps since the cache was last rewritten in full (1: step t-1 was); None: never
    tail: bool  # an end-of-text was decoded before step t
    block_start: bool  # step t opens a block

    @property
    def marked(self) -> bool:
        return self.tail or self.block_start


def step_pairs(events: list, eos_ids: tuple[int, ...] | set[int]) -> list[StepPair]:
    """One StepPair per probed step after the first (events of a decode under evaluation.diagnostics.Probe)."""
    eos, pairs, last_full = set(eos_ids), [], None
    for before, event in zip(events, events[1:]):
        last_full = before.step if before.full else last_full
        if event.kv_change is None or event.drift_l2 is None:
            continue
        change, rows = event.kv_change, set(event.rows)
        recomputed, reused = _mean(change), None  # a full step recomputes every row and reuses none
        if not event.full:
            recomputed = _mean([change[i] for i in sorted(rows)])
            reused = _mean([c for i, c in enumerate(change) if i not in rows])
        pairs.append(StepPair(event.step, before.max_entropy, _mean(change), recomputed, reused, event.full,
                              _mean(event.drift_l2), None if last_full is None else event.step - last_full,
                              any(t in eos for t in before.tokens), event.block != before.block))
    return pairs


SERIES = ("change", "recomputed", "reused")  # every row; the rows the next step computes; those it reuses


def links(pairs: list[StepPair]) -> dict:
    """For each series: its Pearson and Spearman against entropy over every pair with a value, and over
    the unmarked ones only, with how many pairs and the largest entropy among them (the range a
    correlation covers: entropies are 0 and up). `recomputed` is correlated over the pairs whose next
    step is partial (a few rows, the just-decoded ones among them) where a policy takes partial steps at
    all: a full step's mean over every row is another quantity (most rows barely move), and mixing the
    two would make the steps above tau, the ones followed by a full step, look calm (full_next says them)."""
    out = {}
    partial = any(not p.full for p in pairs)
    for name in SERIES:
        for subset, chosen in (("all", pairs), ("unmarked", [p for p in pairs if not p.marked])):
            if name == "recomputed" and partial:
                chosen = [p for p in chosen if not p.full]
            xy = [(p.entropy, getattr(p, name)) for p in chosen if getattr(p, name) is not None]
            x, y = [a for a, _ in xy], [b for _, b in xy]
            out[f"{name}_{subset}"] = {"n": len(xy), "pearson": pearson(x, y), "spearman": spearman(x, y),
                                       "max_entropy": max(x, default=0.0)}
    return out


def full_next(pairs: list[StepPair]) -> dict:
    """The mean change of every row after the unmarked steps followed by a full step (for EntropyCache:
    the steps above tau), against after the others."""
    unmarked = [p for p in pairs if not p.marked]
    full, rest = [p.change for p in unmarked if p.full], [p.change for p in unmarked if not p.full]
    return {"n": len(full), "change": _mean(full), "others": _mean(rest)}


def staleness_curve(pairs: list[StepPair]) -> dict[int, float]:
    """Mean staleness of the cache by steps since its last full rewrite (unmarked pairs)."""
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for p in pairs:
        if not p.marked and p.since_full is not None:
            sums[p.since_full] += p.staleness
            counts[p.since_full] += 1
    return {k: sums[k] / counts[k] for k in sorted(sums)}


NARROW_NATS = 0.2  # entropies all below this: too narrow a range for a correlation to say anything
MIN_PAIRS = 8


def judged(link: dict) -> str:
    """How a Spearman correlation reads, judged as it is shown (to 2 places) and weighed by what it rests
    on: 'few' (below MIN_PAIRS pairs, or NaN), 'narrow' (every entropy below NARROW_NATS: too narrow a
    range to say), 'chance' (a rho within 2 / sqrt(n) of 0, the width of what chance alone gives at that
    n), else its direction and size: 'tracks', 'weakly tracks', 'weakly runs against', 'runs against'."""
    n, rho = link["n"], link["spearman"]
    if n < MIN_PAIRS or math.isnan(rho):
        return "few"
    if link["max_entropy"] < NARROW_NATS:
        return "narrow"
    shown = round(rho, 2)
    if abs(shown) < 2 / math.sqrt(n):
        return "chance"
    if shown >= 0.3:
        return "tracks"
    if shown > 0:
        return "weakly tracks"
    return "weakly runs against" if shown > -0.3 else "runs against"


def verdict(link: dict) -> str:
    """The judgement of a Spearman correlation (judged), as a verb phrase of what_holds's sentence."""
    n, rho, kind = link["n"], link["spearman"], judged(link)
    if kind == "few":
        return f"cannot yet say whether it tracks ({n} step{'s' * (n != 1)})"
    if kind == "narrow":
        return (f"cannot say whether it tracks: every entropy is below {NARROW_NATS} nats, too narrow a range "
                f"(Spearman {round(rho, 2):+.2f} over {n} steps)")
    if kind == "chance":
        return f"shows no link to ({round(rho, 2):+.2f} over {n} steps is within chance)"
    return kind


def what_holds(found: dict, after_full: dict | None = None) -> str:
    """One sentence on the measurements in `found` (links of unmarked pairs): what entropy predicts here.
    Split by rows where the policy takes partial steps at all (as the scatter is)."""
    recomputed, reused, change = found["recomputed_unmarked"], found["reused_unmarked"], found["change_unmarked"]
    if change["n"] < MIN_PAIRS:
        return f"Too few steps yet ({change['n']}) to say what entropy predicts here."
    if found["reused_all"]["n"] == 0:  # every step full (the exact decoder): no split
        return (f"Here the entropy of what a step decodes {verdict(change)} how far the next step's K/V move"
                f"{_rho(change)}.")
    said = (f"Here the entropy of what a step decodes {verdict(recomputed)} how far the rows the next step "
            f"recomputes move{_rho(recomputed, 'partial steps')}, and {verdict(reused)} how far the rows it reuses "
            f"from the cache move{_rho(reused, 'partial steps')}.")
    if after_full and after_full["n"] and after_full["others"] is not None:  # full_next(pairs)
        after = "the step" if after_full["n"] == 1 else f"the {after_full['n']} steps"
        said += (f" After {after} followed by a full step, every row moved "
                 f"{after_full['change']:.3g} on average, against {after_full['others']:.3g} after the others.")
    return said


def _rho(link: dict, steps: str = "steps") -> str:
    """' (Spearman +0.30 over 120 steps, entropies up to 2.1 nats)' where the verdict has not said it."""
    if " (" in verdict(link):  # the verdict already says its rho and n, or why it cannot say
        return ""
    return (f" (Spearman {link['spearman']:+.2f} over {link['n']} {steps}, entropies up to "
            f"{link['max_entropy']:.1f} nats)")


def drift_analysis(events: list, eos_ids: tuple[int, ...] | set[int]) -> dict:
    """Observation 1 of one decode (or pooled events' pairs): the pairs, their links to entropy, the
    staleness curve, how many pairs are marked and why, and the sentence of what holds."""
    return _analysis(step_pairs(events, eos_ids))


def _analysis(pairs: list[StepPair]) -> dict:
    found, after_full = links(pairs), full_next(pairs)
    return {
        "pairs": pairs,
        "links": found,
        "full_next": after_full,
        "staleness": staleness_curve(pairs),
        "marked": {"tail": sum(p.tail for p in pairs), "block_start": sum(p.block_start and not p.tail for p in pairs)},
        "tail": tail_cost(pairs),
        "summary": what_holds(found, after_full),
    }


def tail_cost(pairs: list[StepPair]) -> dict:
    """What the steps after an end-of-text cost a cache: their share of the steps, and the staleness of
    the cache there against elsewhere (the masks after the end-of-text are settled text no partial step
    recomputes once its block is done)."""
    tail, rest = [p for p in pairs if p.tail], [p for p in pairs if not p.marked]
    return {"share": len(tail) / len(pairs) if pairs else 0.0,
            "staleness": _mean([p.staleness for p in tail]), "staleness_elsewhere": _mean([p.staleness for p in rest])}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def volatility_curve(events: list) -> dict[int, float]:
    """Mean K/V change from one step to the next, by steps since the token was unmasked."""
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for event in events:
        for age, change in event.volatility or []:
            sums[int(age)] += change
            counts[int(age)] += 1
    return {age: sums[age] / counts[age] for age in sorted(sums)}


SERIES_NAMES = {"change": "every row", "recomputed": "rows recomputed", "reused": "rows reused"}


def format_drift(report: dict) -> str:
    """drift_report as the command line prints it: the links as a table, the curves, what holds."""
    marked = report["marked"]
    lines = [f"{report['n_pairs']} step pairs; marked apart: {marked['tail']} after an end-of-text, "
             f"{marked['block_start']} into a block's first step",
             "K/V change vs previous-step entropy | pairs | Spearman | Pearson | with marked: pairs | Spearman "
             "| Pearson"]
    for name in SERIES:
        u, a = report["links"][f"{name}_unmarked"], report["links"][f"{name}_all"]
        lines.append(f"{SERIES_NAMES[name]:<36}| {u['n']:5d} | {u['spearman']:+.2f}    | {u['pearson']:+.2f}   | "
                     f"{a['n']:5d} | {a['spearman']:+.2f}    | {a['pearson']:+.2f}")
    tail = report["tail"]
    if tail["staleness"] is not None:
        lines.append(f"after an end-of-text: {tail['share']:.0%} of the steps, staleness {tail['staleness']:.4f} "
                     f"against {tail['staleness_elsewhere'] or 0:.4f} elsewhere")
    lines.append("staleness by steps since the last full step: "
                 + str({k: round(v, 4) for k, v in list(report["staleness"].items())[:12]}))
    lines.append("K/V change by steps since unmasked: "
                 + str({k: round(v, 4) for k, v in list(report["volatility"].items())[:12]}))
    return "\n".join([*lines, report["summary"]])


def drift_report(model, tokenizer, prompts: list[str], policy: str, params: dict, config: DecodeConfig) -> dict:
    """Observations 1 and 2 pooled over prompts, each decoded by `policy` with a Probe: the per-step
    K/V change against entropy (every row, recomputed, reused; all pairs and unmarked), the staleness
    curve, the marked pairs and the sentence of what holds; and the volatility curve."""
    pairs, events_all = [], []
    for prompt in prompts:
        ids = chat_prompt_ids(tokenizer, prompt)
        events = list(decode(model, ids, make_policy(policy, **params), config, before_step=Probe(model)))
        pairs += step_pairs(events, model.config.eos_token_ids)
        events_all += events
    report = _analysis(pairs)
    del report["pairs"]
    return {"n_pairs": len(pairs), **report, "volatility": volatility_curve(events_all)}
