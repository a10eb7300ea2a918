"""Teaching mode: a recorded race replays from its trace alone, on the scaled compute clock, and a bad
trace gets a clear error."""

import copy
import json
import re

import gradio as gr
import pytest
from fake_clock import FakeClock
from races import race_run, stream_race

from app.race.panels import build_race_panels
from app.race.render import LANE_PARTS
from app.race.replay import PACES, STEP_PACE, Replay
from app.race.replay_panel import ReplayPanel, build_replay_panel, check_frame, load_trace_file
from app.race.trace_reader import MAX_TRACE_BYTES, read_trace
from app.serving.registry import EMBEDDED_LABEL


@pytest.fixture(scope="module")
def recorded(registry, tmp_path_factory) -> dict:
    """The trace JSON of a real race on the embedded model (no cache vs EntropyCache, gen 32)."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    updates = list(stream_race(model, tokenizer, race_run(registry), trace_dir=tmp_path_factory.mktemp("traces")))
    return json.loads(updates[-1].final.trace_path.read_text())


def replay_panel() -> ReplayPanel:
    """The replay panel as the Race tab builds it, over the race's panels."""
    with gr.Blocks():
        return build_replay_panel(build_race_panels(), gr.Button())


def replay_of(data: dict) -> Replay:
    return Replay.of(read_trace(json.dumps(data).encode()))


def test_a_replay_shows_the_recorded_race_step_by_step_in_compute_order(recorded) -> None:
    replay = replay_of(recorded)
    lanes = recorded["lanes"]
    assert len(replay) == len(lanes[0]["events"]) + len(lanes[1]["events"])
    ends = [f.clock_s for f in replay.frames]
    assert ends == sorted(ends)  # the shared clock never runs backwards
    for n in range(len(replay) + 1):
        snap = replay.snapshot(n)
        assert sum(len(lane.events) for lane in snap.lanes) == n
        for lane, raw in zip(snap.lanes, lanes):  # each lane shows exactly its recorded steps so far
            assert [e.tokens for e in lane.events] == [e["tokens"] for e in raw["events"][: len(lane.events)]]
            assert lane.clock == pytest.approx(sum(e["compute_s"] for e in raw["events"][: len(lane.events)]))
    end = replay.snapshot(len(replay))
    assert end.finished and [lane.finish_rank for lane in end.lanes] == [lane["finish_rank"] for lane in lanes]
    assert [lane.events[-1].confidences for lane in end.lanes] == [lane["events"][-1]["confidences"] for lane in lanes]


@pytest.mark.parametrize("pace", PACES)
def test_replay_timing_scales_the_recorded_compute_times_exactly(recorded, pace) -> None:
    replay = replay_of(recorded)
    clock = FakeClock(100.0)
    shown = []
    for n in replay.play(0, pace, clock=clock, sleep=clock.sleep):
        shown.append((n, clock.now - 100.0))
    assert [n for n, _ in shown] == list(range(1, len(replay) + 1))  # every frame, in order
    if pace == STEP_PACE:  # one frame (one lane's step) a second, from the first on
        assert [at for _, at in shown] == [float(n) for n, _ in shown]
        return
    scale = {"1x": 1, "10x": 10, "100x": 100}[pace]
    for (_, at), frame in zip(shown, replay.frames):
        assert at == pytest.approx(frame.clock_s * scale, rel=1e-9)


def test_replay_from_the_middle_and_with_a_throttle_keeps_the_schedule(recorded) -> None:
    replay = replay_of(recorded)
    clock = FakeClock(100.0)
    start = len(replay) // 2
    throttle = replay.wall_s(len(replay), "100x") / 5
    shown = [(n, clock.now - 100.0) for n in replay.play(start, "100x", throttle, clock=clock, sleep=clock.sleep)]
    assert shown[-1][0] == len(replay) and all(a < b for (a, _), (b, _) in zip(shown, shown[1:]))
    origin = replay.wall_s(start, "100x")
    for n, at in shown:
        assert replay.wall_s(n, "100x") - origin <= at + 1e-9  # never early
    assert all(b - a >= throttle - 1e-9 for (_, a), (_, b) in zip(shown, shown[1:]))  # at most one a throttle


def test_pause_and_steps_land_on_the_right_event(recorded) -> None:
    replay = replay_of(recorded)
    panel = replay_panel()
    stored = panel.store.put(replay)  # the session's replay, as a load keeps it
    race = panel.race
    n = 7
    left, right = replay.counts(n)
    out = panel.step(stored, n, 1)
    assert out[panel.slider].value == n + 1 and out[panel.frame] == n + 1
    after = replay.counts(n + 1)
    lane = replay.frames[n].lane  # frame n+1 is that lane's next step
    assert after[lane] == (left, right)[lane] + 1 and after[1 - lane] == (left, right)[1 - lane]
    story = out[race.lanes[replay.trace.lanes[lane].side].story]
    assert story.startswith(f"**Step {after[lane] - 1}** (block 0)") and "confidence" in story
    assert panel.step(stored, 0, -1)[panel.slider].value == 0
    assert panel.step(stored, len(replay), 1)[panel.slider].value == len(replay)
    n = next(i for i, f in enumerate(replay.frames) if f.lane == 0) + 1  # the left lane's first step on screen
    paused = panel.show(stored, n)
    assert f"Replay paused: frame {n} of" in paused[race.status] and paused[panel.slider].value == n
    middle = race.lanes["middle"]  # hidden: this race has two lanes
    hidden = {*(getattr(middle, part) for part in LANE_PARTS), middle.story}
    assert set(paused) == set(panel.outputs()) - hidden  # a frame redraws every panel shown
    assert paused[race.middle].visible is False
    shown = replay.counts(n)[0]
    masked = recorded["lanes"][0]["events"][shown - 1]["tokens"].count(recorded["model"]["mask_id"])
    left_text = paused[race.lanes["left"].text]  # the left lane's text as of its step shown (and the legend's mask)
    assert left_text.split('class="ec-text">')[1].count('class="ec-mask') == masked  # the text, not the legend
    with pytest.raises(ValueError, match=rf"Replay frame must be a whole number from 0 to {len(replay)}; got 999"):
        check_frame(replay, 999)
    with pytest.raises(ValueError, match="Nothing to replay yet"):
        check_frame(None, 0)


def test_a_refused_frame_pace_or_trace_is_told_in_the_status_line_alone(recorded, tmp_path) -> None:
    panel = replay_panel()
    replay = replay_of(recorded)
    stored = panel.store.put(replay)
    status = panel.race.status
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "entropycache-trace/1"}')
    for out, message in ((list(panel.play(stored, 0, "3x")), "Pace must be one of: 1x, 10x, 100x, one step per "
                                                              "second; got '3x'"),
                         ([panel.show(stored, -1)], f"Replay frame must be a whole number from 0 to {len(replay)}"),
                         ([panel.step(None, 0, 1)], "Nothing to replay yet"),
                         ([panel.load(str(bad))], "the trace: missing model, settings")):
        assert len(out) == 1 and list(out[0]) == [status] and message in out[0][status]


def mutate(data: dict, path: str, value) -> dict:
    out = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return out


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("format", "v0", "format: expected 'entropycache-trace/2'"),
        ("lanes", [], "lanes: expected 2 (left, right) or 3 (left, middle, right) lanes, got 0"),
        ("lanes.1.decoding.threshold", 2.0, "lanes[1].decoding: threshold must be"),
        ("lanes.1.decoding.gen_len", 64, "lanes[1].decoding.gen_len: expected 32 (settings.gen_len), got 64"),
        ("lanes.1.decoding", DELETE, "lanes[1]: missing decoding"),
        ("lanes.0.finish_rank", 3, "lanes[0].finish_rank: expected 1 to 2, got 3"),
        ("lanes.0.events.0.forward_s", "fast", "lanes[0].events[0].forward_s: expected a number, got text"),
        ("weight_floor_s", -1, "weight_floor_s: expected a number from 0"),
        ("lanes.0.side", "right", "lanes[0].side: expected 'left'"),
        ("lanes.1.events.0.step", 3, "lanes[1].events[0].step: expected 0 (steps in order from 0), got 3"),
        ("lanes.1.events.0.confidences", [1.5], "lanes[1].events[0].confidences[0]: expected a number from 0 to 1"),
        ("lanes.1.events.0.entropies", ["x"], "lanes[1].events[0].entropies[0]: expected a number, got text"),
        ("lanes.0.events.0.compute_s", float("nan"), "lanes[0].events[0].compute_s: expected a number from 0"),
        ("lanes.0.events.0.rows", [10**6], "lanes[0].events[0].rows[0]: expected 0 to"),
        ("lanes.0.events.0.tokens", [], "lanes[0].events[0].tokens: expected 32 (settings.gen_len), got 0"),
        ("lanes.0.events.0.unmasked_tokens", [999_999], "token 999999 has no text in model.pieces"),
        ("lanes.0.events.0.extra", 1, "lanes[0].events[0]: unknown field 'extra'"),
        ("lanes.0.events.0.reason", DELETE, "lanes[0].events[0]: missing reason"),
        ("lanes.0.events.0.done", True, "only the last step may be (and must be) the end of the decode"),
        ("lanes.0.compute_s", 123.0, "lanes[0].compute_s: 123.0 is not the sum of its steps' compute_s"),
        ("settings.gen_len", 10**9, "settings.gen_len: gen length must be an integer in [1, 512], got 1000000000"),
        ("model.pieces", [], "model.pieces: expected an object, got a list"),
        ("prompt_ids", "1 2 3", "prompt_ids: expected a list, got text"),
        ("model.n_layers", 257, "model.n_layers: expected"),
        ("model.sep", "<", "model.sep: expected ' ' or '', got '<'"),
        ("settings.compared_params", {"\udcff" * 100: 1}, "settings.compared_params: '\\udcff"),  # escaped, cut
    ],
)
def test_a_malformed_trace_gets_a_clear_error(recorded, path, value, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        read_trace(json.dumps(mutate(recorded, path, value)).encode())


def test_a_trace_of_more_work_than_any_race_may_do_is_refused(recorded, monkeypatch) -> None:
    """Every race the app runs is within its device's budget, a GPU's the largest: a trace past it was made by
    hand, and what replaying it draws grows with that work."""
    from app.race import trace_reader

    length = len(recorded["prompt_ids"]) + recorded["settings"]["gen_len"]
    work = sum(length * len(lane["events"]) for lane in recorded["lanes"])
    monkeypatch.setattr(trace_reader, "MAX_WORK", work)
    read_trace(json.dumps(recorded).encode())
    monkeypatch.setattr(trace_reader, "MAX_WORK", work - 1)
    with pytest.raises(ValueError, match=re.escape(f"The trace's race did {work:,} positions of work (positions x "
                                                   f"steps, over its lanes); a race the app runs does at most")):
        read_trace(json.dumps(recorded).encode())


def test_a_trace_from_before_capture_times_still_replays_the_same(recorded) -> None:
    """Traces downloaded before steps reported CUDA graph capture time have no capture_s: it was 0."""
    older = copy.deepcopy(recorded)
    for lane in older["lanes"]:
        del lane["totals"]["capture_s"]
        for event in lane["events"]:
            del event["capture_s"], event["totals"]["capture_s"]
    assert replay_of(older).frames == replay_of(recorded).frames
    with pytest.raises(ValueError, match=re.escape("lanes[0].events[0].capture_s: expected a number from 0")):
        read_trace(json.dumps(mutate(recorded, "lanes.0.events.0.capture_s", -1)).encode())


def test_a_trace_from_before_the_later_decode_settings_reads_them_as_their_defaults(recorded) -> None:
    """Traces downloaded before top_p, top_k, alg, schedule and EntropyCache's scope were declared have none
    of them: each reads as its declared default (what those decodes ran at), in the run's settings and
    every lane's."""
    later = ("top_p", "top_k", "alg", "schedule")
    older = copy.deepcopy(recorded)
    del older["settings"]["scope"]  # EntropyCache's, declared since too
    for name in later:
        del older["settings"][name]
        for lane in older["lanes"]:
            del lane["decoding"][name]
    old, new = read_trace(json.dumps(older).encode()), read_trace(json.dumps(recorded).encode())
    assert old == new
    assert [(lane.decoding["top_p"], lane.decoding["top_k"], lane.decoding["alg"], lane.decoding["schedule"])
            for lane in old.lanes] == [(None, None, "maskgit_plus", "block")] * len(old.lanes)
    assert replay_of(older).frames == replay_of(recorded).frames
    with pytest.raises(ValueError, match=re.escape("lanes[1].decoding: schedule must be one of block, dream")):
        read_trace(json.dumps(mutate(recorded, "lanes.1.decoding.schedule", "blocks")).encode())


def test_a_setting_declared_after_a_trace_was_written_reads_as_its_default(recorded, monkeypatch) -> None:
    """A new decode setting is its declaration (and its use in the decode), nothing else: a trace written
    before it was declared still loads and replays, the setting at its declared default in the run's
    settings and every lane's, and checked as declared. Declared here for the test: DecodeConfig's
    graphs, a field no declaration names (how the passes run)."""
    from app.controls.declared import DECODE_CONTROLS, RUN_CONTROLS, Control
    from core import DecodeConfig, Param

    assert "graphs" not in recorded["settings"] and not any("graphs" in lane["decoding"] for lane in recorded["lanes"])
    frames = replay_of(recorded).frames
    declared = Param("graphs", str, "auto", choices=("auto", "on", "off"), help="how a step's passes run")
    monkeypatch.setattr(DecodeConfig, "parameters", (*DecodeConfig.parameters, declared))
    monkeypatch.setitem(DECODE_CONTROLS, "graphs", Control.of(declared))
    monkeypatch.setitem(RUN_CONTROLS, "graphs", Control.of(declared))
    trace = read_trace(json.dumps(recorded).encode())
    assert trace.settings["graphs"] == "auto" and [lane.decoding["graphs"] for lane in trace.lanes] == ["auto"] * 2
    assert replay_of(recorded).frames == frames
    with pytest.raises(ValueError, match=re.escape("lanes[1].decoding: graphs must be one of auto, on, off, got 'x'")):
        read_trace(json.dumps(mutate(recorded, "lanes.1.decoding.graphs", "x")).encode())
    with pytest.raises(ValueError, match=re.escape("settings.graphs: graphs must be one of auto, on, off, got 'x'")):
        read_trace(json.dumps(mutate(recorded, "settings.graphs", "x")).encode())


def test_a_trace_from_when_the_baseline_was_called_none_reads_as_vanilla(recorded) -> None:
    """One name for the baseline: a trace the app writes says vanilla, in its settings and its lane; one
    written before, saying none, still loads, and reads (and replays) alike."""
    assert recorded["settings"]["policy"] == recorded["lanes"][0]["policy"] == "vanilla"
    older = copy.deepcopy(recorded)
    older["settings"]["policy"] = older["lanes"][0]["policy"] = "none"
    assert read_trace(json.dumps(older).encode()) == read_trace(json.dumps(recorded).encode())
    assert replay_of(older).layout().labels == replay_of(recorded).layout().labels


def test_not_json_and_oversized_traces_are_refused(recorded, tmp_path) -> None:
    with pytest.raises(ValueError, match="The trace is not JSON"):
        read_trace(b"{nope")
    with pytest.raises(ValueError, match="The trace is not JSON"):
        read_trace(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError, match="expected an object, got a list"):
        read_trace(b"[]")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_TRACE_BYTES + 1))
    with pytest.raises(ValueError, match=f"a trace may be at most {MAX_TRACE_BYTES >> 20} MB"):
        load_trace_file(str(big))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(recorded))
    assert len(load_trace_file(str(good))) == len(replay_of(recorded))


# ---- bounded memory and a pause that lands where the screen is (app/race/replay_store.py, playback.py) ----


def test_the_store_keeps_one_replay_per_session_and_drops_the_least_recently_used(recorded) -> None:
    from app.race.replay_store import DROPPED, ReplayStore, replay_bytes

    replay = replay_of(recorded)
    size = replay_bytes(replay)
    store = ReplayStore(max_bytes=3 * size, max_replays=10)
    a, b = store.put(replay), store.put(replay_of(recorded))
    a2 = store.put(replay_of(recorded), replacing=a)  # a session loading another: its old one goes
    assert len(store) == 2 and store.get(a) is None and not store.dropped(None)
    assert store.get(b) is not None  # b is now the most recently used: a2 goes first
    c, d = store.put(replay_of(recorded)), store.put(replay_of(recorded))
    assert store.get(a2) is None and store.dropped(a2) and store.used == 3 * size and len(store) == 3
    assert all(store.get(s) is not None for s in (b, c, d))
    with pytest.raises(ValueError, match=r"^This trace takes about \d+ MB once read; a replay here may take at most"):
        ReplayStore(max_bytes=size - 1).put(replay)
    panel = replay_panel()
    gone = panel.store.put(replay)
    panel.store._replays.clear()  # as if other sessions' replays had pushed it out
    assert DROPPED in panel.show(gone, 0)[panel.race.status]


def test_pause_lands_on_the_frame_the_playback_sent_last_and_nothing_follows(recorded, monkeypatch) -> None:
    """Playing at 100x on a fake clock, paused while the page still says frame 0 (its number lags): the
    paused banner names the frame the playback sent last, and the playback sends nothing after it."""
    import dataclasses

    import app.race.playback
    from app.race.playback import Playback

    replay = replay_of(recorded)
    clock = FakeClock(100.0)
    monkeypatch.setattr(Playback, "sleep", lambda self, seconds: clock.sleep(seconds))
    monkeypatch.setattr(app.race.playback, "HALT_WAIT_S", 0.01)  # it waits at a yield below, as Gradio holds it
    panel = dataclasses.replace(replay_panel(), clock=clock)
    stored = panel.store.put(replay)
    playing = panel.play(stored, 0, "100x")
    sent = [next(playing) for _ in range(4)]  # the start, then three frames on the fake clock
    last = sent[-1][panel.frame]
    assert 0 < last < len(replay) and [s[panel.frame] for s in sent] == sorted({s[panel.frame] for s in sent})
    paused = panel.pause(stored, 0)
    assert paused[panel.frame] == last and f"Replay paused: frame {last} of {len(replay)}" in paused[panel.race.status]
    assert list(playing) == []  # nothing after the pause: no frame, no "playing" banner over a still screen
    finished = list(panel.play(stored, last, "100x"))  # to the end this time
    assert "finished" in finished[-1][panel.race.status]
    again = panel.pause(stored, 3)  # the page's number lags: Pause still says the frame on screen, the last
    assert f"Replay paused: frame {len(replay)} of {len(replay)}" in again[panel.race.status]


def test_a_playback_whose_frames_go_unread_stops(recorded, monkeypatch) -> None:
    """A client that asks for Play and never reads the stream: its frames stop once the session is behind, as a
    race's do (app/serving/listener.py), not on to the end of the trace."""
    import dataclasses
    from types import SimpleNamespace

    from app.race.playback import Playback

    replay = replay_of(recorded)
    clock = FakeClock(100.0)
    monkeypatch.setattr(Playback, "sleep", lambda self, seconds: clock.sleep(seconds))
    behind: set[str] = set()
    panel = dataclasses.replace(replay_panel(), clock=clock, forgotten=lambda session: session in behind)
    playing = panel.play(panel.store.put(replay), 0, "100x", SimpleNamespace(session_hash="gone"))
    sent = [next(playing)[panel.frame] for _ in range(3)]  # the start, then two frames on the fake clock
    assert sent == sorted(set(sent)) and sent[-1] < len(replay)
    behind.add("gone")
    assert list(playing) == []


def test_each_frame_of_a_playback_carries_only_what_changed(recorded, monkeypatch) -> None:
    from app.race.playback import Playback

    replay = replay_of(recorded)
    clock = FakeClock(100.0)
    monkeypatch.setattr(Playback, "sleep", lambda self, seconds: clock.sleep(seconds))
    import dataclasses

    panel = dataclasses.replace(replay_panel(), clock=clock)
    frames = list(panel.play(panel.store.put(replay), 0, "1x"))
    race = panel.race
    for before, after in zip(frames, frames[1:]):
        moved = {replay.trace.lanes[lane].side for lane in range(len(replay.trace.lanes))
                 if replay.counts(after[panel.frame])[lane] != replay.counts(before[panel.frame])[lane]}
        for side in {lane.side for lane in replay.trace.lanes} - moved:  # a lane that did not step is not resent
            assert race.lanes[side].rows not in after


def test_a_lane_draws_the_tau_its_policy_decides_by_live_and_replayed(registry, recorded) -> None:
    """A lane's tau is its policy's (app/controls/run.py entropy_threshold): EntropyCache's lane has the
    run's, a lane whose policy decides by no entropy has none; a replay reads the same from its trace."""
    from app.race.comparison import LaneLabel

    live = race_run(registry, policy="dual", tau=0.5)
    assert [LaneLabel.of(lane).tau for lane in live.lanes] == [None, 0.5] and live.tau == 0.5
    replayed = replay_of(recorded).layout().labels
    assert [label.tau for label in replayed] == [None, recorded["settings"]["tau"]] == [None, 1.0]
    hand_made = mutate(recorded, "lanes.0.policy", "entropy(tau=1.0, k=2)")  # a policy by its registry name
    assert [label.tau for label in replay_of(hand_made).layout().labels] == [1.0, 1.0]
