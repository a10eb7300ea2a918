"""The race (app/race/decode.py) on fake decoders: the lane behind steps, snapshots are throttled on wall
time, a stop closes both decoders, and the status line's account of capturing graphs."""

from __future__ import annotations

import dataclasses

from step_events import step_event

from app.controls.run import decoding_of
from app.race.comparison import Comparison, LaneLabel
from app.race.decode import race
from core.config import DecodeConfig
from core.events import Totals
from core.warmup import COMPILED


def fake_decoder(costs: list[float], closed: list[str] | None = None, name: str = ""):
    try:
        for i, cost in enumerate(costs):
            yield step_event(step=i, unmasked=[1 + i], unmasked_tokens=[5], entropies=[0.0], compute_s=cost,
                             done=i == len(costs) - 1)
    finally:
        if closed is not None:
            closed.append(name)


def test_race_always_steps_the_lane_behind_and_the_cheaper_one_finishes_first() -> None:
    snaps = list(race([fake_decoder([1.0] * 4), fake_decoder([0.5] * 4)], ["slow", "fast"]))
    assert len(snaps) == 8  # throttle 0: one snapshot per step of either lane
    clocks = [(0.0, 0.0)] + [tuple(la.clock for la in s.lanes) for s in snaps]
    for before, snap in zip(clocks, snaps):
        other = 1 - snap.stepped
        if not snap.lanes[other].done:
            assert before[snap.stepped] <= before[other]  # never step the lane that is ahead
    slow, fast = snaps[-1].lanes
    assert (slow.clock, fast.clock) == (4.0, 2.0)
    assert fast.finish_rank == 1 and slow.finish_rank == 2 and snaps[-1].finished


def test_the_lane_that_finishes_first_on_the_clock_is_first_though_it_took_its_last_step_later() -> None:
    """Costs 1, 1, 1, 1, 2 against five of 1: the first lane takes its last step first (both at clock 4, it is
    first in line) but ends at 6, the second at 5. Until the second is past 6 or done, no lane is first."""
    snaps = list(race([fake_decoder([1.0] * 4 + [2.0]), fake_decoder([1.0] * 5)], ["costly end", "even"]))
    costly, even = snaps[-1].lanes
    assert (costly.clock, even.clock) == (6.0, 5.0) and (even.finish_rank, costly.finish_rank) == (1, 2)
    left_first = next(s for s in snaps if s.lanes[0].done)
    assert not left_first.lanes[1].done and left_first.lanes[0].finish_rank is None  # not sure yet: unranked


def test_race_throttles_snapshots_on_wall_time_but_keeps_finishes_and_the_end() -> None:
    ticks = iter(i * 0.1 for i in range(1000))
    snaps = list(
        race(
            [fake_decoder([1.0] * 10), fake_decoder([1.0] * 10)],
            ["a", "b"],
            throttle_s=0.35,
            wall_clock=lambda: next(ticks),
        )
    )
    assert 5 <= len(snaps) < 20
    assert sum(la.clock for la in snaps[-1].lanes) == 20.0 and snaps[-1].finished
    assert sum(1 for s in snaps if any(la.done for la in s.lanes)) >= 2  # the first finish is never skipped


def _steps_between_renders(render_s: float, throttle_s: float = 0.35) -> list[int]:
    """Steps of 0.1 s wall time each, two lanes of 30; the caller takes render_s over every snapshot.
    The steps taken between two throttled snapshots (not those a finish forced)."""
    now = [0.0]

    def stepping(n: int):
        for event in fake_decoder([1.0] * n):
            now[0] += 0.1  # a step's wall time
            yield event

    snaps = []
    for snap in race([stepping(30), stepping(30)], ["a", "b"], throttle_s=throttle_s, wall_clock=lambda: now[0]):
        snaps.append(snap)
        now[0] += render_s  # rendering the snapshot
    steps = [sum(len(la.events) for la in s.lanes) for s in snaps]
    assert steps[-1] == 60 and snaps[-1].finished
    return [b - a for a, b, s in zip(steps, steps[1:], snaps[1:]) if not any(la.done for la in s.lanes)]


def test_the_throttle_window_opens_when_the_caller_has_rendered() -> None:
    """However long a render takes, throttle_s of decoding comes between two of them."""
    assert set(_steps_between_renders(0.01)) == {4}  # 0.4 s of steps: the first tick past 0.35 s


def test_a_costly_render_widens_the_window_to_four_times_its_cost() -> None:
    """Rendering never takes more than a fifth of the wall time: a 0.22 s render is followed by 0.88 s
    of decoding (9 steps of 0.1 s) before the next snapshot, not 0.35 s."""
    assert set(_steps_between_renders(0.22)) == {9}
    assert set(_steps_between_renders(0.22, throttle_s=0)) == {1}  # 0: every step, whatever a render costs


def test_race_stop_ends_it_and_closes_both_decoders() -> None:
    closed: list[str] = []
    n = iter(range(100))
    snaps = list(
        race(
            [fake_decoder([1.0] * 10, closed, "a"), fake_decoder([1.0] * 10, closed, "b")],
            ["a", "b"],
            should_stop=lambda: next(n) >= 3,
        )
    )
    assert len(snaps) == 3 and not snaps[-1].finished
    assert sorted(closed) == ["a", "b"]


def test_the_status_line_tells_what_capturing_graphs_cost_and_no_lane_is_charged() -> None:
    from app.race.decode import Lane, Snapshot
    from app.race.speed import banner_html

    event = next(fake_decoder([0.5]))
    captured = dataclasses.replace(event, capture_s=0.25, totals=Totals(capture_s=0.25))
    lanes = (Lane("none", [event], 0.5, True, 2), Lane("ours", [captured], 0.25, True, 1))
    snap = Snapshot(lanes, 1, True, capture_s=1.5)
    assert snap.graphs_s == 1.75  # before the race, and a shape first met during it
    decoding = decoding_of(DecodeConfig(gen_len=1, block_len=1))
    comparison = Comparison((LaneLabel("left", "vanilla", decoding), LaneLabel("right", "ours", decoding)), 20)
    text = banner_html(lanes, comparison, graphs_s=snap.graphs_s)
    assert "<b>2.00x</b>" in text and "CUDA graphs captured in 1.75 s, once for this length: on no lane's clock" in text
    assert "CUDA graphs" not in banner_html(lanes, comparison)
    compiled = banner_html(lanes, comparison, graphs_s=2.5, prepared=COMPILED)  # a CPU's passes (core/compiled.py)
    assert "Passes compiled in 2.50 s, once for every length: on no lane's clock" in compiled
    failed = banner_html(lanes, comparison, graphs_failed="RuntimeError: operation not permitted when stream is "
                                                          "capturing")
    assert "<b>2.00x</b>" in failed and ("CUDA graphs could not be captured (RuntimeError: operation not permitted "
                                         "when stream is capturing): every lane runs eagerly.") in failed
