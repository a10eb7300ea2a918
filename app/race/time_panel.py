"""Where each lane's time goes, live: full passes, partial passes, the token choice and the decision
(they add up to the lane's clock: evaluation.forward_cost.TimeSplit); what one full and one partial pass
cost at this length on this device; on a GPU the floor of reading every weight once; the most a
cache could gain with the lane's schedule, how close it came; and one sentence from those numbers
that says why. No gradio here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from app.race.comparison import LaneLabel
from app.race.decode import Lane
from evaluation.forward_cost import TimeSplit

HEADERS = ("lane", "full passes", "partial passes", "token choice", "decision", "compute clock")
NOT_RECORDED = "This trace does not record the time of each pass: it was recorded before the race kept it."


def time_html(lanes: Sequence[Lane], labels: Sequence[LaneLabel], length: int, floor_s: float | None) -> str:
    """The panel for a race's lanes as they stand; `length`: the rows of a full pass (prompt + gen),
    `floor_s`: the weight-read floor (evaluation.forward_cost.weight_read_floor_s; None on the CPU)."""
    splits = [TimeSplit.of(lane.events) for lane in lanes]
    if any(split is None for split in splits):
        return _panel("", NOT_RECORDED)
    rows = "".join(_row(label, split, lane.clock) for label, split, lane in zip(labels, splits, lanes))
    table = (f"<table><tr>{''.join(f'<th>{h}</th>' for h in HEADERS)}</tr>{rows}</table>")
    return _panel(table, " ".join(_sentences(lanes, labels, splits, length, floor_s)))


def _panel(table: str, text: str) -> str:
    return (f'<div class="ec-time"><div class="ec-time-title">Where the time goes</div>{table}'
            f'<p>{html.escape(text, quote=False)}</p></div>')


def _row(label: LaneLabel, split: TimeSplit, clock: float) -> str:
    def part(seconds: float, count: int | None = None) -> str:
        share = f" ({seconds / clock:.0%})" if clock else ""
        times = f"{count} &times; {_ms(seconds / count)} = " if count else ""
        return f"{times}{seconds:.3f} s{share}" if count != 0 else "-"

    cells = [f"{html.escape(label.title)}<br><code>{html.escape(label.policy)}</code>",
             part(split.full_s, split.full_passes), part(split.partial_s, split.partial_passes),
             part(split.choice_s), part(split.decision_s), f"<b>{clock:.3f} s</b>"]
    return f"<tr>{''.join(f'<td>{c}</td>' for c in cells)}</tr>"


def pass_costs(splits: Sequence[TimeSplit]) -> tuple[float | None, float | None, float | None]:
    """(one full pass, one partial pass, its rows), each averaged over every lane's passes of that
    kind: the lanes share the sequence's length, so a full pass costs the same in each."""
    full = sum(s.full_passes for s in splits)
    partial = sum(s.partial_passes for s in splits)
    return (sum(s.full_s for s in splits) / full if full else None,
            sum(s.partial_s for s in splits) / partial if partial else None,
            sum(s.partial_rows for s in splits) / partial if partial else None)


def _sentences(lanes: Sequence[Lane], labels: Sequence[LaneLabel], splits: Sequence[TimeSplit], length: int,
               floor_s: float | None) -> list[str]:
    full, partial, rows = pass_costs(splits)
    finished = bool(lanes) and all(lane.done for lane in lanes)  # the sentences say what is true at the end too
    out = []
    if floor_s is not None:
        out.append(f"Reading every weight once takes {_ms(floor_s)} on this device "
                   "(the weights' bytes at its measured copy bandwidth): no pass can be faster.")
    if not full:  # none yet, or a loaded trace's full passes that say they took no time
        return out + ["No full pass took a measurable time." if finished else "No full pass yet."]
    if partial is None:
        pass_cost = f"One full pass over all {length} rows costs {_ms(full)}"
        if finished:
            return out + [f"{pass_cost}. No lane took a partial pass: every step of every lane recomputed every "
                          "row, so the cache saved nothing."]
        return out + [f"{pass_cost}; no lane has taken a partial pass yet."]
    share = partial / full
    cost = (f"A partial pass here ({rows:.0f} of {length} rows) costs {share:.0%} of a full one "
            f"({_ms(partial)} against {_ms(full)})")
    if share >= 1:  # at batch 1 on a short prompt both passes may be the weights' read
        out.append(f"{cost}: here a step that reuses the cache saves nothing.")
    elif floor_s is not None and share > 0.5:
        out.append(f"{cost}: at batch 1 both read every weight, so a cache can save at most {1 - share:.0%} of a "
                   "step's pass. After a longer prompt a full pass costs more and a partial one about the same.")
    else:
        out.append(f"{cost}, so a step that reuses the cache saves up to {1 - share:.0%} of its pass.")
    for lane, label, split in zip(lanes, labels, splits):
        ceiling = split.ceiling(full) if label.cached else None
        if ceiling is not None and lane.clock:
            out.append(_how_close(label, split, full, ceiling, lane.clock))
    return out


def _how_close(label: LaneLabel, split: TimeSplit, full: float, ceiling: float, clock: float) -> str:
    """A cached lane's ceiling, and how close it came: its clock against running each of its steps as a
    full pass (the rest of its clock is the token choice, the decision, and full passes dearer than the
    mean)."""
    name = "EntropyCache" if label.side == "right" else label.policy
    reached = split.steps * full / clock
    schedule = f"{name}'s schedule ({split.full_passes} of {split.steps} steps full) allows at most {_times(ceiling)}"
    took = f"it took {clock:.3f} s, {_times(reached)}, {reached / ceiling:.0%} of that ceiling."
    if reached <= ceiling or not split.full_passes:
        return f"{schedule} over running every step as a full pass ({split.steps * full:.3f} s); {took}"
    # The ceiling is counted at every lane's mean full pass: a lane whose own ran cheaper can pass it.
    return (f"{schedule} over running every step as a full pass at the lanes' mean cost ({_ms(full)} a pass, "
            f"{split.steps * full:.3f} s); its own full passes cost {_ms(split.full_s / split.full_passes)}, so {took}")


def _times(ratio: float) -> str:
    """6.6x; near 1, two decimals, so that a ratio below 1 never reads as 1.0x."""
    return f"{ratio:.1f}x" if ratio >= 1.05 else f"{ratio:.2f}x"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


CSS = """
.ec-time { border: 1px solid #ddd; border-radius: 8px; padding: 6px 10px; font-size: 13px; }
.ec-time-title { font-weight: 600; margin-bottom: 4px; }
.ec-time table { width: 100%; border-collapse: collapse; }
.ec-time th, .ec-time td { text-align: left; padding: 2px 6px !important; border: none !important;
  border-bottom: 1px solid #eee !important; background: none !important; vertical-align: top; }
.ec-time p { margin: 6px 0 0 0; }
"""
