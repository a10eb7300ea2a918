"""The speed panel of each lane, the live speedup banner and the final summary table.

Every number is the decoder's own measurement: compute seconds are summed step times (see
app/race/decode.py, and core/device.py for the clock), so rendering and network never enter them.
"""

from __future__ import annotations

import html

from app.race.decode import Lane
from app.widgets.banner import banner

SUMMARY_HEADERS = ["side", "policy", "steps", "full steps", "rows computed", "compute s", "tokens", "tokens/s",
                   "speedup vs left"]


def speedup(base: Lane, ours: Lane) -> float | None:
    """How much faster `ours` decodes than `base`, as measured.

    While running: the ratio of their decode rates (positions unmasked per compute second), the only
    comparison that is fair before both are done. Once both are done: the ratio of their total
    compute times, i.e. time to finish.
    """
    if base.done and ours.done:
        return base.clock / ours.clock if ours.clock > 0 else None
    if not (base.clock and ours.clock and base.decoded and ours.decoded):
        return None
    return (ours.decoded / ours.clock) / (base.decoded / base.clock)


def speed_html(lane: Lane, title: str, policy: str) -> str:
    t = lane.last.totals if lane.last else None
    if lane.done:
        state = "finished first" if lane.finish_rank == 1 else "finished"
    else:
        state = "decoding..." if lane.events else "waiting"
    rows = [
        ("steps", f"{t.steps}" if t else "0"),
        ("full steps", f"{t.full_steps}" if t else "0"),
        ("rows computed", f"{t.rows_computed:,} ({t.rows_fraction:.0%} of full)" if t else "0"),
        ("compute time", f"{lane.clock:.3f} s"),
        ("tokens/s", f"{t.tokens_per_s:.1f}" if t else "-"),
    ]
    cells = "".join(f"<tr><td>{k}</td><td><b>{v}</b></td></tr>" for k, v in rows)
    flag = "ec-first" if lane.finish_rank == 1 else ""
    return (
        f'<div class="ec-speed {flag}"><div class="ec-speed-title">{html.escape(title)} '
        f'<code>{html.escape(policy)}</code> <span class="ec-state">{state}</span></div>'
        f'<table>{cells}</table></div>'
    )


def banner_html(base: Lane, ours: Lane, message: str = "", graphs_s: float = 0.0, graphs_failed: str = "") -> str:
    """The race's status line; `graphs_s`: what capturing CUDA graphs cost it (Snapshot.graphs_s), said
    apart because it is on neither lane's clock; `graphs_failed`: why capturing them failed, if it did
    (Snapshot.graphs_failed)."""
    s = speedup(base, ours)
    done = base.done and ours.done
    if s is None:
        text = "Decoding..." if (base.events or ours.events) else "Starting..."
    elif done:
        text = f"EntropyCache finished in {ours.clock:.3f} s vs {base.clock:.3f} s: <b>{s:.2f}x</b> speedup (measured)"
    else:
        text = f"Live speedup: <b>{s:.2f}x</b> (decode rate, measured compute time)"
    notes = [message] if message else []
    if graphs_s:
        notes.append(f"CUDA graphs captured in {graphs_s:.2f} s, once for this length: on neither lane's clock.")
    if graphs_failed:
        notes.append(f"CUDA graphs could not be captured ({graphs_failed}): both lanes run eagerly.")
    extra = "".join(f" <span class='ec-note'>{html.escape(note)}</span>" for note in notes)
    return banner(f"{text}{extra}")


def summary_rows(base: Lane, ours: Lane, policies: tuple[str, str]) -> list[list]:
    out = []
    for side, lane, policy in (("left", base, policies[0]), ("right", ours, policies[1])):
        t = lane.last.totals
        ratio = base.clock / lane.clock if lane.clock else float("nan")
        out.append([side, policy, t.steps, t.full_steps, f"{t.rows_fraction:.1%}", round(lane.clock, 4), t.tokens,
                    round(t.tokens_per_s, 1), round(ratio, 2)])
    return out


CSS = """
.ec-speed { border: 1px solid #ddd; border-radius: 8px; padding: 6px 10px; }
.ec-speed.ec-first { border-color: #2ca02c; box-shadow: 0 0 0 2px #2ca02c33; }
.ec-speed-title { font-weight: 600; margin-bottom: 4px; }
.ec-state { font-weight: normal; color: #666; font-size: 12px; margin-left: 6px; }
.ec-speed table { width: 100%; font-size: 13px; border-collapse: collapse; }
.ec-speed table, .ec-speed tr, .ec-speed td { border: none !important; background: none !important; }
.ec-speed td { padding: 1px 4px !important; }
"""
