"""A picked point as text: for each prompt, the exact decoder's text and the cached one side by side,
every token where they differ marked, the first one flagged, and the steps the policy made full
(forced at a block's start, or by entropy) as a strip of the decode's steps.

Everything comes from the bench rows' per-prompt records (evaluation/bench.py `per_prompt`): what was
decoded is never decoded again. Token text comes from the pieces the tab kept of the model's tokenizer
(app/widgets/text_view.py), every piece HTML-escaped: a visitor's prompt and a model's output are text.
No gradio here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from app.widgets.text_diff import LEGEND as DIFF_LEGEND
from app.widgets.text_diff import diff_column, parting

CSS = """
.ec-point-head { font-size: 15px; margin: 4px 0 8px; }
.ec-prompt { border: 1px solid #dde2ea; border-radius: 8px; padding: 8px 10px; margin-bottom: 10px; }
.ec-prompt-text { color: #444; font-style: italic; }
.ec-steps { display: flex; flex-wrap: wrap; gap: 1px; margin: 4px 0; }
.ec-steps span { display: inline-block; width: 5px; height: 12px; background: #dfe3ea; }
.ec-steps span.ec-step-forced { background: #555; }
.ec-steps span.ec-step-entropy { background: #d62728; }
.ec-legend .ec-key { display: inline-block; width: 8px; height: 12px; vertical-align: middle; }
"""
PICK_HINT = ("Click a point of the plot (or an EntropyCache row of the table) to see its texts beside the exact "
             "decoder's.")
MAX_PROMPT_SHOWN = 300  # characters of a prompt shown above its texts (a 4-shot prompt is long)
LEGEND = (f'<div class="ec-legend">{DIFF_LEGEND} steps: '
          '<span><span class="ec-key" style="background:#555"></span> full, forced (a block\'s first)</span>'
          '<span><span class="ec-key" style="background:#d62728"></span> full by entropy</span>'
          '<span><span class="ec-key" style="background:#dfe3ea"></span> partial</span></div>')


def find_point(rows: list[dict], tau: float, k: int) -> dict | None:
    """The EntropyCache row of (tau, k), if the sweep has one."""
    return next((r for r in rows if r["policy"] == "entropy" and (r["params"]["tau"], r["params"]["k"]) == (tau, k)),
                None)


def neighbour(rows: list[dict], selected: tuple[float, int] | None, step: int) -> tuple[float, int] | None:
    """The point `step` places along tau from `selected`, at its k (the ends stay put); with none picked, the
    lowest tau of the first k. None when the sweep has no EntropyCache point."""
    points = sorted((r["params"]["k"], r["params"]["tau"]) for r in rows if r["policy"] == "entropy")
    if not points:
        return None
    if selected is None or (selected[1], selected[0]) not in points:
        return points[0][1], points[0][0]
    k = selected[1]
    taus = [tau for kk, tau in points if kk == k]
    i = min(max(taus.index(selected[0]) + step, 0), len(taus) - 1)
    return taus[i], k


def point_html(rows: list[dict], tau: float, k: int, pieces: Mapping[int, str], sep: str) -> str:
    """The point (tau, k) of the sweep's rows, prompt by prompt, against the reference row (rows[0])."""
    row = find_point(rows, tau, k)
    if row is None:  # find_point finds nothing in no rows too
        return f'<div class="ec-point-head">This sweep has no point tau {tau:g}, k {k}.</div>'
    prompts = row["per_prompt"]
    same = sum(p["identical"] for p in prompts)
    head = (f"<b>tau {tau:g}, k {k}</b>: {same} of {len(prompts)} prompt{'s' * (len(prompts) != 1)} decoded "
            f"exactly as the exact decoder does. {_shared(prompts, row['first_divergence_median'])} Agreement "
            f"{row['agreement']:.3f}{_in_text(row)}; speedup {row['speedup']:.2f}x.")
    cards = [_card(i, ref, ours, tau, k, pieces, sep) for i, (ref, ours) in
             enumerate(zip(rows[0]["per_prompt"], prompts))]
    return f'<div class="ec-point-head">{head}</div>{LEGEND}{"".join(cards)}'


def _card(i: int, ref: dict, ours: dict, tau: float, k: int, pieces: Mapping[int, str], sep: str) -> str:
    first = ours["first_divergence"]
    if ours["identical"]:
        parted = f"the same text as the exact decoder ({len(ref['tokens'])} tokens)"
    else:
        parted = parting(first, len(ref["tokens"]), len(ours["tokens"]), "the exact decoder")
    forced, by_entropy = ours["full_steps_forced_at"], ours["full_steps_entropy_at"]
    full = (f"full steps: {len(by_entropy)} by entropy{_at(by_entropy)}, {len(forced)} forced{_at(forced)}, "
            f"of {ours['steps']}")
    graded = "" if ours["correct"] is None else f"; graded {'pass' if ours['correct'] else 'fail'} (the task's check)"
    shown = ours["prompt"] if len(ours["prompt"]) <= MAX_PROMPT_SHOWN else "..." + ours["prompt"][-MAX_PROMPT_SHOWN:]
    return (f'<div class="ec-prompt" id="sweep-prompt-{i + 1}"><div><b>Prompt {i + 1}</b>: '
            f'<span class="ec-prompt-text">{html.escape(shown)}</span></div>'
            f'<div class="ec-legend">{parted}; agreement {ours["agreement"]:.3f}{_in_text(ours)}; {full}{graded}</div>'
            f'{_steps(ours)}<div class="ec-pair">'
            f'{diff_column("exact decoder", ref["tokens"], ours["tokens"], first, pieces, sep)}'
            f'{diff_column(f"EntropyCache tau {tau:g}, k {k}", ours["tokens"], ref["tokens"], first, pieces, sep)}'
            "</div></div>")


def _shared(prompts: list[dict], median: float) -> str:
    """How many tokens each prompt's cached text shares with the exact decoder's from the start, prompt by
    prompt as the cards below say where it parts (at the next token), and the median of them the plot draws."""
    each = ", ".join(f"{'all ' if p['identical'] else ''}{p['first_divergence']} (prompt {i + 1})"
                     for i, p in enumerate(prompts))
    return (f"Tokens the same before the texts part: {each}; median {median:g} (a text that never parts counts "
            "whole).")


def _in_text(measured: dict) -> str:
    """Agreement over the exact decoder's answer alone: `agreement` also counts the masks decoded after
    an end-of-text, which no reader sees."""
    share = measured.get("agreement_in_text")
    return "" if share is None else f" ({share:.3f} over the exact decoder's answer)"


def _at(steps: list[int]) -> str:
    if not steps:
        return ""
    shown = ", ".join(str(s) for s in steps[:12]) + (", ..." if len(steps) > 12 else "")
    return f" (step{'s' * (len(steps) != 1)} {shown})"


def _steps(record: dict) -> str:
    """One cell per step of the cached decode: forced full, full by entropy, or partial."""
    kinds = dict.fromkeys(record["full_steps_forced_at"], "ec-step-forced")
    kinds.update(dict.fromkeys(record["full_steps_entropy_at"], "ec-step-entropy"))
    cells = "".join(f'<span class="{kinds.get(s, "")}" title="step {s}"></span>' for s in range(record["steps"]))
    return f'<div class="ec-steps">{cells}</div>'
