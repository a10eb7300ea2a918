"""What an lm-eval run's requests cost, per policy decoded: the decoder's own totals, summed, one record
per request, merged over the ranks of a data-parallel run (evaluation/lm_eval_ranks.py), and the
summary the speed table and the results JSON report."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.events import Totals


@dataclass
class SpeedLog:
    """What every request cost, per policy: the decoder's own totals, summed, and one record each."""

    totals: dict[str, Totals] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)

    def add(self, policy: str, totals: Totals, record: dict) -> None:
        self.totals.setdefault(policy, Totals())
        self.totals[policy] += totals
        self.requests.append(record)

    @classmethod
    def merged(cls, logs: list[SpeedLog]) -> SpeedLog:
        """Every rank's log as one: totals summed, records in the order of the task's documents (each
        request's policy before its baseline, as its rank decoded them), whichever rank decoded them."""
        out = cls()
        for log in logs:
            for policy, totals in log.totals.items():
                out.totals.setdefault(policy, Totals())
                out.totals[policy] += totals
            out.requests += log.requests
        out.requests.sort(key=lambda r: (str(r.get("task")), -1 if r.get("doc_id") is None else r["doc_id"]))
        return out

    def summary(self, policy: str, baseline: str | None) -> dict:
        """tokens/s, full-step and rows fractions, decision overhead; the speedup over the baseline if run.
        With several ranks the seconds are summed over them: tokens/s is per device, not the run's."""
        t = self.totals.get(policy, Totals())
        out = {
            "requests": sum(r["policy"] == policy for r in self.requests),
            "tokens_per_s": t.tokens_per_s,
            "decode_s": t.compute_s,
            "steps": t.steps,
            "full_steps_fraction": t.full_steps / t.steps if t.steps else 0.0,
            "rows_fraction": t.rows_fraction,
            "decision_overhead": t.decision_s / t.compute_s if t.compute_s else 0.0,
            "capture_s": t.capture_s,  # CUDA graphs captured on first use: not in decode_s
        }
        if baseline is not None and baseline in self.totals and t.compute_s:
            out["speedup_vs_" + baseline] = self.totals[baseline].compute_s / t.compute_s
        return out
