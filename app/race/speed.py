"""The speed panel of each lane, the live speedup banner and the final summary table.

Every number is the decoder's own measurement: compute seconds are summed step times (see
app/race/decode.py, and core/device.py for the clock), so rendering and network never enter them.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from app.race.comparison import Comparison, LaneLabel, factors, speedup
from app.race.decode import Lane
from app.race.parted import partings
from app.widgets.banner import banner, changes_html
from core.warmup import CAPTURED, COMPILED

SUMMARY_HEADERS = ["side", "policy", "decoding", "steps", "full steps", "rows computed", "compute s", "tokens",
                   "tokens/s", "speedup vs left", "agreement with left", "parts from left at token"]
# Each column's share of the table's width, so that it fits a 1366-px screen with every column, its text
# wrapped between words: the policy and the schedule take two lines where they must.
SUMMARY_WIDTHS = ["6%", "15%", "15%", "6%", "6%", "8%", "7%", "6%", "7%", "8%", "8%", "8%"]


def speed_html(lane: Lane, label: LaneLabel) -> str:
    t = lane.last.totals if lane.last else None
    if lane.done:
        state = "finished first" if lane.finish_rank == 1 else "finished"
    else:
        state = "decoding..." if lane.events else "waiting"
    rows = [  # two figures a line, so that a lane fits one screen
        (("steps", f"{t.steps}" if t else "0"), ("full steps", f"{t.full_steps}" if t else "0")),
        (("rows computed", f"{t.rows_computed:,} ({t.rows_fraction:.0%} of full)" if t else "0"),),
        (("compute time", f"{lane.clock:.3f} s"), ("tokens/s", f"{t.tokens_per_s:.1f}" if t else "-")),
    ]
    cells = "".join("<tr>" + "".join(f"<td>{k}</td><td{' colspan=3' * (len(row) == 1)}><b>{v}</b></td>"
                                     for k, v in row) + "</tr>" for row in rows)
    flag = "ec-first" if lane.finish_rank == 1 else ""
    return (
        f'<div class="ec-speed {flag}"><div class="ec-speed-title">{html.escape(label.title)} '
        f'<code>{html.escape(label.policy)}</code> <span class="ec-state">{state}</span></div>'
        f'<div class="ec-schedule">{html.escape(label.schedule)}</div><table>{cells}</table></div>'
    )


def banner_html(lanes: Sequence[Lane], comparison: Comparison, message: str = "", graphs_s: float = 0.0,
                graphs_failed: str = "", prepared: str = CAPTURED, changed: Sequence[str] = ()) -> str:
    """The race's status line: the speedup of the right lane over the left one, its two factors where
    a middle lane runs, and in words which comparison that is. `graphs_s`: what capturing CUDA graphs
    cost the race (Snapshot.graphs_s; `prepared` says what it paid for, or compiling CPU passes), said apart
    because it is on no lane's clock; `graphs_failed`:
    why capturing them failed, if it did (Snapshot.graphs_failed); `changed`: what the race decodes otherwise
    than it was sent (Run.changed), said first."""
    base, ours = lanes[0], lanes[-1]
    done = all(lane.done for lane in lanes)
    s = speedup(base, ours, done)
    if s is None:
        text = "Decoding..." if any(lane.events for lane in lanes) else "Starting..."
    elif done:
        text = f"{finish_words(lanes, comparison)}: <b>{s:.2f}x</b> speedup (measured){_factors(lanes, comparison)}"
    else:
        text = f"Live speedup: <b>{s:.2f}x</b> (decode rate, measured compute time){_factors(lanes, comparison)}"
    notes = [comparison.words() + "."]
    if message:
        notes.append(message)
    if graphs_s:
        once = "for every length" if prepared == COMPILED else "for this length"
        notes.append(f"{prepared[0].upper()}{prepared[1:]} in {graphs_s:.2f} s, once {once}: on no lane's clock.")
    if graphs_failed:
        notes.append(f"CUDA graphs could not be captured ({graphs_failed}): every lane runs eagerly.")
    extra = "".join(f" <span class='ec-note'>{html.escape(note, quote=False)}</span>" for note in notes)
    return banner(f"{text}{changes_html(changed)}{extra}")


def finish_words(lanes: Sequence[Lane], comparison: Comparison) -> str:
    """A finished race in words: the lane that finished first, and EntropyCache's time against the left lane's
    (the two the speedup compares)."""
    first = next(i for i, lane in enumerate(lanes) if lane.finish_rank == 1)
    said = html.escape(comparison.finished_first([lane.clock for lane in lanes], first), quote=False)
    return said if first == 0 else f"{said}, against {lanes[0].clock:.3f} s for the left lane"


def _factors(lanes: Sequence[Lane], comparison: Comparison) -> str:
    """' = 12.9x from parallel decoding x 2.16x from the cache', each factor measured between two lanes."""
    measured, names = factors(lanes), comparison.factor_names()
    if measured is None or names is None or None in measured:
        return ""
    return (f" = <b>{measured[0]:.2f}x</b> from {html.escape(names[0])} (left to middle) &times; "
            f"<b>{measured[1]:.2f}x</b> from {html.escape(names[1])} (middle to right)")


def summary_rows(lanes: Sequence[Lane], labels: Sequence[LaneLabel]) -> list[list]:
    """A row per lane; its agreement with the left lane's answer and where it parts from it (app/race/parted.py;
    '-' on the left lane's own row)."""
    base, parts = lanes[0], partings(lanes)
    out = []
    for i, (lane, label, part) in enumerate(zip(lanes, labels, parts)):
        t = lane.last.totals
        ratio = base.clock / lane.clock if lane.clock else float("nan")
        agreement = "-" if i == 0 or part.agreement is None else f"{part.agreement:.3f}"
        parted = "-" if i == 0 else ("same text" if part.tokens == parts[0].tokens else part.first + 1)
        out.append([label.side, label.policy, label.schedule, t.steps, t.full_steps, f"{t.rows_fraction:.1%}",
                    round(lane.clock, 4), t.tokens, round(t.tokens_per_s, 1), round(ratio, 2), agreement, parted])
    return out


CSS = """
.ec-speed { border: 1px solid #ddd; border-radius: 8px; padding: 6px 10px; }
.ec-speed.ec-first { border-color: #2ca02c; box-shadow: 0 0 0 2px #2ca02c33; }
.ec-speed-title { font-weight: 600; margin-bottom: 2px; }
.ec-schedule { font-size: 12px; color: #444; margin-bottom: 4px; }
.ec-state { font-weight: normal; color: #666; font-size: 12px; margin-left: 6px; }
.ec-speed table { width: 100%; font-size: 12px; border-collapse: collapse; }
.ec-speed table, .ec-speed tr, .ec-speed td { border: none !important; background: none !important; }
.ec-speed td { padding: 0 4px !important; line-height: 1.35; }
#summary th, #summary td { font-size: 13px; }
#summary th *, #summary td * { word-break: normal; overflow-wrap: anywhere; }
"""
