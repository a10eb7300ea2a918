"""The Drift tab's status line in short plain sentences, for a teacher to read aloud: how far the decode
has come, what entropy predicts on this prompt, and what was left out.

Every number says its unit or what it means; the entropies are said over the range the scatter plots
(every step it draws), and a correlation's own range beside it where that is narrower; steps are
numbered from 0, as the step slider numbers them. The numbers and their judgement are
evaluation.diagnostics' (drift_analysis, judged); only the words are this module's. No gradio here.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluation.diagnostics import MIN_PAIRS, NARROW_NATS, judged

SPEARMAN = "A rank correlation (Spearman's) is +1 when one always rises with the other, 0 when they are unrelated."
MOVE = {"tracks": "move further", "weakly tracks": "move a little further", "weakly runs against": "move a little less",
        "runs against": "move less"}
# A correlation of entropy with how far some rows move, by its judgement (evaluation.diagnostics.judged).
LINK_SAID = {
    "few": "Too few {steps} yet ({n}) to say whether entropy predicts how far {what} move.",
    "narrow": ("Before those {steps} every entropy is below {narrow} nats: too narrow a range to say whether it "
               "predicts how far {what} move ({rho})."),
    "chance": "How far {what} move shows no link to entropy ({rho}: within chance).",
    **{kind: f"After a more uncertain step, {{what}} {move} ({{rho}})." for kind, move in MOVE.items()},
}


def progress(events: Sequence, policy: str, max_steps: int, finished: bool) -> str:
    """How far the decode has come, its steps numbered as the step slider numbers them."""
    n, full = len(events), sum(e.full for e in events)
    if finished:
        return (f"Done: {n} steps (numbered 0 to {n - 1}, as on the step slider), {full} of them full; {policy}, "
                "probe on.")
    return (f"Decoding: {n} steps so far (0 to {n - 1}; at most 0 to {max_steps - 1}), {full} of them full; "
            f"{policy}, probe on.")


def findings(analysis: dict) -> list[str]:
    """What entropy predicts here (evaluation.diagnostics.drift_analysis), sentence by sentence."""
    pairs, links = analysis["pairs"], analysis["links"]
    counted = links["change_unmarked"]["n"]
    if counted < MIN_PAIRS:
        return [f"Too few steps yet ({counted}) to say what entropy predicts here."]
    entropies = [p.entropy for p in pairs]
    said = [f"The scatter's {len(pairs)} steps (each one after step 0) have entropies from {min(entropies):.1f} "
            f"to {max(entropies):.1f} nats."]
    if links["reused_all"]["n"] == 0:  # every step full: no split into recomputed and reused rows
        return [*said, _link("the next step's K/V", links["change_unmarked"], "steps"), SPEARMAN]
    recomputed, reused = links["recomputed_unmarked"], links["reused_unmarked"]
    said += [_link("the rows the next step recomputes", recomputed, "partial steps"),
             _link("the rows it reuses from the cache", reused, "partial steps")]
    if recomputed["n"] and round(recomputed["max_entropy"], 1) < round(max(entropies), 1):
        said.append(f"Those partial steps come after entropies up to {recomputed['max_entropy']:.1f} nats; the "
                    "points further right are followed by a full step, or left out (hollow).")
    said.append(SPEARMAN)
    after = analysis["full_next"]
    if after["n"] and after["others"] is not None:
        steps = "the step" if after["n"] == 1 else f"the {after['n']} steps"
        said.append(f"After {steps} followed by a full step, every row's K/V moved {_percent(after['change'])} on "
                    f"average (relative change); after the others, {_percent(after['others'])}.")
    return said


def left_out(marked: dict) -> str:
    """The steps the numbers leave out (hollow on the scatter), and why."""
    tail, block = marked["tail"], marked["block_start"]
    return (f"Hollow on the scatter and left out of these numbers: {tail} step{'s' * (tail != 1)} after an "
            f"end-of-text, {block} into a block's first step.")


def _link(what: str, link: dict, steps: str) -> str:
    """One correlation of entropy with how far `what` move, over `link['n']` `steps`, as a sentence."""
    rho = f"rank correlation {link['spearman']:+.2f} over {link['n']} {steps}"
    return LINK_SAID[judged(link)].format(what=what, steps=steps, n=link["n"], rho=rho, narrow=NARROW_NATS)


def _percent(share: float) -> str:
    """A relative change as a percentage, to 3 significant digits: 0.0102 as 1.02%."""
    return f"{share * 100:.3g}%"
