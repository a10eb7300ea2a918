"""The Drift tab's status line (app/drift/status.py): short sentences, each number with its unit or meaning,
the entropies over the scatter's range, steps numbered from 0 as the step slider numbers them."""

from __future__ import annotations

import math
from types import SimpleNamespace

from app.drift.status import SPEARMAN, findings, left_out, progress
from evaluation.diagnostics import StepPair


def pair(step: int, entropy: float, full: bool = False, marked: bool = False) -> StepPair:
    return StepPair(step, entropy, 0.01, 0.02, None if full else 0.005, full, 0.05, 1, marked, False)


def link(n: int, spearman: float, max_entropy: float) -> dict:
    return {"n": n, "spearman": spearman, "pearson": spearman, "max_entropy": max_entropy}


def analysis(pairs: list[StepPair], links: dict, after: dict) -> dict:
    return {"pairs": pairs, "links": links, "full_next": after, "marked": {"tail": 20, "block_start": 6}}


# 140 partial steps at entropies up to 1.0 nats (tau 1), 57 above it, each followed by a full step, up to 2.3
PAIRS = [pair(i + 1, i / 139) for i in range(140)] + [pair(141 + i, 1.1 + i / 47.5, full=True) for i in range(58)]
SPLIT = {"change_unmarked": link(197, 0.2, 2.3), "reused_all": {"n": 140},
         "recomputed_unmarked": link(140, 0.33, 1.0), "reused_unmarked": link(140, -0.14, 1.0)}


def test_the_decode_so_far_is_said_with_its_steps_numbered_as_the_slider_numbers_them() -> None:
    events = [SimpleNamespace(full=step % 3 == 0) for step in range(224)]
    assert progress(events, "entropy(tau=1.0, k=2)", 256, finished=True) == (
        "Done: 224 steps (numbered 0 to 223, as on the step slider), 75 of them full; entropy(tau=1.0, k=2), probe on.")
    assert progress(events[:58], "entropy(tau=1.0, k=2)", 256, finished=False) == (
        "Decoding: 58 steps so far (0 to 57; at most 0 to 255), 20 of them full; entropy(tau=1.0, k=2), probe on.")


def test_what_entropy_predicts_is_said_in_short_sentences_over_the_scatters_range() -> None:
    said = findings(analysis(PAIRS, SPLIT, {"n": 57, "change": 0.0102, "others": 0.0101}))
    assert said == [
        "The scatter's 198 steps (each one after step 0) have entropies from 0.0 to 2.3 nats.",
        "After a more uncertain step, the rows the next step recomputes move further (rank correlation +0.33 over "
        "140 partial steps).",
        "How far the rows it reuses from the cache move shows no link to entropy (rank correlation -0.14 over 140 "
        "partial steps: within chance).",
        "Those partial steps come after entropies up to 1.0 nats; the points further right are followed by a full "
        "step, or left out (hollow).",
        SPEARMAN,
        "After the 57 steps followed by a full step, every row's K/V moved 1.02% on average (relative change); after "
        "the others, 1.01%.",
    ]
    assert all(" (" not in sentence.split(")")[-1] for sentence in said)  # no bracket left open mid-sentence
    assert left_out({"tail": 20, "block_start": 6}) == (
        "Hollow on the scatter and left out of these numbers: 20 steps after an end-of-text, 6 into a block's first "
        "step.")


def test_a_weak_a_narrow_an_unsplit_and_a_young_decode_are_each_said_plainly() -> None:
    weak = {**SPLIT, "recomputed_unmarked": link(140, -0.2, 1.0)}
    assert ("After a more uncertain step, the rows the next step recomputes move a little less (rank correlation "
            "-0.20 over 140 partial steps).") in findings(analysis(PAIRS, weak, {"n": 0, "others": 0.01}))
    narrow = {**SPLIT, "reused_unmarked": link(140, 0.9, 0.1)}
    assert ("Before those partial steps every entropy is below 0.2 nats: too narrow a range to say whether it "
            "predicts how far the rows it reuses from the cache move (rank correlation +0.90 over 140 partial "
            "steps).") in findings(analysis(PAIRS, narrow, {"n": 0, "change": None, "others": None}))
    every_step_full = {**SPLIT, "reused_all": {"n": 0}, "reused_unmarked": link(0, math.nan, 0.0)}
    assert findings(analysis(PAIRS, every_step_full, {"n": 0, "change": None, "others": None}))[1:] == [
        "After a more uncertain step, the next step's K/V move a little further (rank correlation +0.20 over 197 "
        "steps).", SPEARMAN]
    assert findings(analysis(PAIRS[:3], {**SPLIT, "change_unmarked": link(3, 0.5, 0.1)}, {})) == [
        "Too few steps yet (3) to say what entropy predicts here."]
