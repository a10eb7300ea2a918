"""The paper's comparison in the Race: each lane at its own settings (vanilla: no cache, one token per
step), a middle lane that splits the speedup into two measured factors, the presets, where each lane's
time goes, and each lane's settings kept by the trace and its replay (old traces still load)."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import gradio as gr
import pytest
from races import controls, race_run, race_tab, stream_race
from step_events import step_event

from app.client import named
from app.controls.declared import RUN_CONTROLS, raced_policies
from app.controls.presets import CACHE_ALONE, PAPER, PRESETS
from app.controls.run import RawRun, check_run, decoding_of
from app.race.comparison import Comparison, LaneLabel, factors, speedup
from app.race.decode import Lane
from app.race.panels import OUTPUT_NAMES, build_race_panels
from app.race.parted import parted_html
from app.race.replay import Replay
from app.race.replay_panel import REPLAY_OUTPUT_NAMES, build_replay_panel
from app.race.speed import SUMMARY_HEADERS, banner_html, summary_rows
from app.race.tab import preset_inputs
from app.race.time_panel import NOT_RECORDED, time_html
from app.race.trace_reader import read_trace
from app.serving.examples import chat_examples
from app.serving.registry import EMBEDDED_LABEL, ModelChoice, ModelRegistry
from app.serving.sessions import RunBoard
from app.widgets.text_view import TokenText
from core.config import DecodeConfig
from core.decoder import generate
from core.events import Totals
from core.loading import chat_prompt_ids
from core.policies import make_policy
from evaluation.forward_cost import TimeSplit


@pytest.fixture(scope="module")
def paper(registry, tmp_path_factory) -> dict:
    """A race as the paper compares: vanilla against EntropyCache with threshold 0.9 (gen 32), rendered."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    run = race_run(registry, policy="vanilla", threshold=0.9)
    updates = list(stream_race(model, tokenizer, run, throttle_s=0, trace_dir=tmp_path_factory.mktemp("traces")))
    trace = json.loads(updates[-1].final.trace_path.read_text())
    return {"run": run, "updates": updates, "trace": trace}


def test_vanilla_is_none_one_token_per_step_and_a_middle_lane_runs_none_at_our_settings(registry, paper) -> None:
    run, last, trace = paper["run"], paper["updates"][-1], paper["trace"]
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, run.prompt)
    ours = DecodeConfig(gen_len=32, block_len=16, threshold=0.9)
    vanilla = DecodeConfig(gen_len=32, block_len=16)
    expected = [generate(model, ids, make_policy("none"), vanilla), generate(model, ids, make_policy("none"), ours),
                generate(model, ids, make_policy("entropy"), ours)]
    assert [lane.side for lane in run.lanes] == ["left", "middle", "right"]
    assert last.sides == ("left", "middle", "right")
    assert [lane.tokens for lane in last.lanes] == [e.tokens for e in expected]  # token for token
    assert [len(lane["events"]) for lane in trace["lanes"]] == [e.totals.steps for e in expected]
    assert expected[0].totals.steps > expected[1].totals.steps  # vanilla really is one token a step
    assert [lane["decoding"]["threshold"] for lane in trace["lanes"]] == [None, 0.9, 0.9]
    assert [row[2] for row in last.final.summary] == ["one token per step", "parallel decoding (threshold 0.9)",
                                                     "parallel decoding (threshold 0.9)"]


def test_the_banner_gives_the_total_and_each_factor_from_two_lanes_it_ran(paper) -> None:
    last, trace = paper["updates"][-1], paper["trace"]
    left, middle, right = (lane["compute_s"] for lane in trace["lanes"])
    text = re.sub("<[^>]+>", "", last.banner_html)
    total, first, second = left / right, left / middle, middle / right
    assert (f"{total:.2f}x speedup (measured) = {first:.2f}x from parallel decoding (left to middle) "
            f"× {second:.2f}x from the cache (middle to right)") in text.replace("&times;", "×")
    assert trace["speedup"] == pytest.approx(total)
    n = len(trace["prompt_ids"])  # 44 tokens before the 32 it decodes: a long prompt, the paper's regime
    assert ("EntropyCache with parallel decoding (threshold 0.9) against vanilla decoding (no cache, one token per "
            f"step), on a {n}-token prompt: the paper's comparison.") in text
    speedup = SUMMARY_HEADERS.index("speedup vs left")
    assert [row[speedup] for row in last.final.summary] == [1.0, round(first, 2), round(total, 2)]


def test_the_same_settings_race_two_lanes_the_cache_alone(registry, tmp_path) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    run = race_run(registry, policy="vanilla")  # one token per step: vanilla decoding at EntropyCache's settings
    assert [lane.side for lane in run.lanes] == ["left", "right"]
    assert run.lanes[0].config == run.lanes[1].config == run.config
    last = list(stream_race(model, tokenizer, run, throttle_s=60, trace_dir=tmp_path))[-1]
    assert last.sides == ("left", "right")
    n = len(run.prompt_ids)
    assert (f"EntropyCache against vanilla decoding (no cache), both at one token per step, on a {n}-token prompt: the "
            "cache alone.") in last.banner_html
    assert "from the cache" not in last.banner_html  # no middle lane, no factors
    parallel = decoding_of(DecodeConfig(gen_len=32, block_len=16, threshold=0.9))  # a vanilla race's middle and right
    alone = Comparison((LaneLabel("left", "vanilla", parallel), LaneLabel("right", "entropy(tau=1.0, k=2)", parallel)),
                       44)
    assert alone.words() == ("EntropyCache against vanilla decoding (no cache), both at parallel decoding "
                             "(threshold 0.9), on a 44-token prompt: the cache alone")
    # One token a step however it is set: no steps, as many steps as tokens, a threshold of 1, blocks of one
    for settings in (dict(steps=0), dict(steps=16), dict(threshold=1.0), dict(block_len=1, threshold=0.5)):
        run = race_run(registry, policy="vanilla", **{"gen_len": 16, "block_len": 8, "threshold": 0, **settings})
        assert [lane.side for lane in run.lanes] == ["left", "right"], settings
        assert run.config.steps is None and run.config.threshold is None
    dual = race_run(registry, policy="dual")
    words = Comparison(tuple(LaneLabel.of(lane) for lane in dual.lanes), 44).words()
    assert words == "EntropyCache against dual, both at one token per step, on a 44-token prompt"


def test_a_lanes_schedule_and_the_factor_names_are_said_from_its_settings() -> None:
    base = decoding_of(DecodeConfig(gen_len=64, block_len=16))
    steps = LaneLabel("right", "entropy(tau=1.0, k=2)", base | {"steps": 16})
    assert steps.schedule == "16 steps (4 tokens a step)" and steps.gain == "4 tokens a step"
    labels = (LaneLabel("left", "dual", base), LaneLabel("middle", "dual", base | {"steps": 16}), steps)
    assert Comparison(labels, 80).factor_names() == ("4 tokens a step", "EntropyCache in place of dual")
    assert Comparison(labels, 80).words() == ("EntropyCache, 16 steps (4 tokens a step) against dual, one token per "
                                              "step, on a 80-token prompt")
    uneven = LaneLabel("right", "entropy(tau=1.0, k=2)", base | {"steps": 24})  # 64 tokens in 24 steps
    assert uneven.schedule == "24 steps (2.67 tokens a step)"
    nearly_one = LaneLabel("right", "entropy(tau=1.0, k=2)", base | {"gen_len": 256, "block_len": 256, "steps": 255})
    assert nearly_one.schedule == "255 steps (1.004 tokens a step)"  # not rounded to the one token it is not
    one_each = LaneLabel("left", "vanilla", base | {"steps": 64})  # as many steps as tokens: vanilla decoding
    assert not one_each.parallel and one_each.gain == "" and one_each.schedule == "one token per step"
    assert one_each.name == "vanilla decoding (no cache, one token per step)"
    for one_a_step in (DecodeConfig(gen_len=64, block_len=16, threshold=1.0),  # no confidence is above 1
                       DecodeConfig(gen_len=64, block_len=1, threshold=0.9)):  # blocks of one token
        label = LaneLabel("right", "entropy(tau=1.0, k=2)", decoding_of(one_a_step))  # as a hand-made trace has it
        assert not label.parallel and label.schedule == "one token per step" and label.gain == ""


def test_presets_set_the_compared_lane_every_control_and_the_models_long_example(registry) -> None:
    tab = race_tab(registry, RunBoard())
    ins = tab.inputs
    choice = registry.choice(EMBEDDED_LABEL)
    out = preset_inputs(registry, ins, PAPER, EMBEDDED_LABEL)
    assert out[ins.prompt] == choice.examples[choice.paper_example] and out[ins.policy] == "vanilla"
    values = {key: out[ins.controls[key]] for key in RUN_CONTROLS}
    assert values == {key: control.default for key, control in RUN_CONTROLS.items()} | {
        "threshold": 0.9, "gen_len": 256, "block_len": 32}
    alone = preset_inputs(registry, ins, CACHE_ALONE, EMBEDDED_LABEL)
    assert alone[ins.policy] == "vanilla" and alone[ins.controls["threshold"]] == 0  # one name for the baseline
    assert alone[ins.prompt] == out[ins.prompt]
    for preset in PRESETS:  # each is a race the server accepts, with the lanes it says
        run = check_run(registry, RawRun(out[ins.prompt], EMBEDDED_LABEL, preset.policy, preset.controls(), {}),
                        raced_policies(), against_ours=True)
        assert len(run.lanes) == (3 if preset is PAPER else 2)
    chat = ModelRegistry([ModelChoice("chat", "x", "cuda", 128, 32, chat_examples())])
    long = preset_inputs(chat, ins, PAPER, "chat")[ins.prompt]
    assert long.count("Question:") == 6 and "worked examples" in chat.choice("chat").example_list[0].title


def test_where_the_time_goes_adds_up_to_each_lanes_clock(paper) -> None:
    trace, last = paper["trace"], paper["updates"][-1]
    for lane in trace["lanes"]:
        events = read_trace(json.dumps(trace).encode()).lanes[[x["side"] for x in trace["lanes"]].index(lane["side"])]
        split = TimeSplit.of(events.events)
        assert split.total_s == pytest.approx(lane["compute_s"], rel=1e-9)
        assert split.full_passes + split.partial_passes == len(lane["events"])
        assert all(e["forward_s"] > 0 and e["choice_s"] >= 0 for e in lane["events"])
    text = re.sub("<[^>]+>", " ", last.time_html)
    assert "Where the time goes" in text and text.count(" s ") >= 3
    assert re.search(r"A partial pass here \(\d+ of \d+ rows\) costs \d+% of a full one", text)
    # Which sentence depends on the clocks: a lane whose own full passes ran cheaper than the lanes' mean says so.
    assert re.search(r"EntropyCache's schedule \(\d+ of \d+ steps full\) allows at most [\d.]+x over running every "
                     r"step as a full pass (\([\d.]+ s\); |at the lanes' mean cost \([\d.]+ ms a pass, [\d.]+ s\); "
                     r"its own full passes cost [\d.]+ ms, so )it took [\d.]+ s, [\d.]+x, \d+% of that ceiling", text)


@pytest.mark.parametrize("floor_s", [None, 0.09])
def test_where_a_partial_pass_costs_a_full_ones_the_panel_promises_no_saving(floor_s) -> None:
    """At batch 1 on a short prompt both passes can be the weights' read: a partial pass costs 105% here."""
    full = step_event(full=True, forward_s=0.1, choice_s=0.0, compute_s=0.1, layer_rows=[40])
    partial = step_event(forward_s=0.105, choice_s=0.0, compute_s=0.105, layer_rows=[10])
    events = [full, partial, partial, partial, partial]
    lane = Lane("entropy", events, sum(e.compute_s for e in events), True, 1)
    decoding = decoding_of(DecodeConfig(gen_len=8, block_len=8))
    text = re.sub("<[^>]+>", " ", time_html([lane], [LaneLabel("right", "entropy(tau=1.0, k=2)", decoding)], 40,
                                            floor_s))
    assert "costs 105% of a full one (105.0 ms against 100.0 ms): here a step that reuses the cache saves nothing." in (
        text)
    assert "saves up to" not in text and "save at most" not in text
    assert "allows at most 0.96x over running every step as a full pass" in text  # 0.5 s / 0.52 s, not "1.0x"
    free = Lane("entropy", [replace(full, forward_s=0.0), partial], 0.205, True, 1)  # a trace can say so
    ours = [LaneLabel("right", "entropy(tau=1.0, k=2)", decoding)]
    assert "No full pass took a measurable time." in time_html([free], ours, 40, None)  # the race is over: not "yet"
    assert "No full pass yet." in time_html([replace(free, done=False, finish_rank=None)], ours, 40, None)


def test_each_lanes_settings_survive_the_trace_and_its_replay(paper) -> None:
    trace, run = paper["trace"], paper["run"]
    replay = Replay.of(read_trace(json.dumps(trace).encode()))
    assert [lane.decoding for lane in replay.trace.lanes] == [lane.decoding for lane in run.lanes]
    layout = replay.layout()
    assert layout.comparison.words() == Comparison(tuple(LaneLabel.of(lane) for lane in run.lanes),
                                                   len(run.prompt_ids)).words()
    with gr.Blocks():
        panel = build_replay_panel(build_race_panels(), gr.Button())
    out = panel.show(panel.store.put(replay), len(replay))  # the session holds its key in the store
    assert "the paper's comparison" in out[panel.race.status]
    assert out[panel.race.middle].visible is True
    assert set(out) == set(panel.outputs())


def test_a_trace_of_the_first_format_still_loads_with_the_runs_settings_for_both_lanes(registry, tmp_path) -> None:
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    last = list(stream_race(model, tokenizer, race_run(registry), throttle_s=60, trace_dir=tmp_path))[-1]
    current = json.loads(last.final.trace_path.read_text())
    old = copy.deepcopy(current)
    old["format"] = "entropycache-trace/1"
    del old["weight_floor_s"]
    for lane in old["lanes"]:
        del lane["decoding"]
        for event in lane["events"]:
            del event["forward_s"], event["choice_s"]
    then, now = (Replay.of(read_trace(json.dumps(t).encode())) for t in (old, current))
    assert then.frames == now.frames
    assert [lane.decoding for lane in then.trace.lanes] == [lane.decoding for lane in now.trace.lanes]
    assert NOT_RECORDED in re.sub("<[^>]+>", "", html_of(then))
    with pytest.raises(ValueError, match=re.escape("lanes: at most 2 entries, got 3")):  # no middle lane then
        read_trace(json.dumps({**old, "lanes": [*old["lanes"], old["lanes"][0]]}).encode())
    clash = {**old, "settings": {**old["settings"], "block_len": 24}}  # each control in range, not together
    with pytest.raises(ValueError, match=re.escape("settings: gen_len 32 is not a multiple of block_len 24")):
        read_trace(json.dumps(clash).encode())


def html_of(replay: Replay) -> str:
    from app.race.render import Renderer

    return Renderer(replay.layout(), cursor=True).update(replay.snapshot(len(replay))).time_html


def test_a_client_reads_a_race_and_a_replay_by_name() -> None:
    with gr.Blocks():
        panel = build_replay_panel(build_race_panels(), gr.Button())
    race, replay = (api_outputs(outputs) for outputs in (panel.race.outputs(), panel.outputs()))
    assert len(OUTPUT_NAMES) == len(race) == len(set(OUTPUT_NAMES)) == len(panel.race.outputs()) - 1
    assert len(REPLAY_OUTPUT_NAMES) == len(replay) == len(set(REPLAY_OUTPUT_NAMES))
    assert named(list(range(len(OUTPUT_NAMES))))["right.final"] == OUTPUT_NAMES.index("right.final")
    by_name = dict(zip(OUTPUT_NAMES, race))
    assert by_name["right.final"] is panel.race.lanes["right"].final and by_name["time"] is panel.race.time
    assert dict(zip(REPLAY_OUTPUT_NAMES, replay))["left.story"] is panel.race.lanes["left"].story
    with pytest.raises(ValueError, match=f"expected /run's {len(OUTPUT_NAMES)} outputs, got 3"):
        named([1, 2, 3])


def api_outputs(outputs: list) -> list:
    """The outputs an HTTP client gets: layout blocks (the middle lane's column) are not among them."""
    return [block for block in outputs if isinstance(block, gr.components.Component)]


def test_the_handler_races_vanilla_in_three_lanes_and_shows_the_middle_one(registry) -> None:
    tab = race_tab(registry, RunBoard())
    numbers = controls(threshold=0.9)
    prompt = registry.choice(EMBEDDED_LABEL).examples[1]
    outs = list(tab.run(prompt=prompt, model=EMBEDDED_LABEL, policy="vanilla", **numbers))
    panels = tab.panels
    shown = [out[panels.middle].visible for out in outs if panels.middle in out]
    assert shown and all(shown)
    assert "finished" in outs[-1][panels.status] and outs[-1][panels.lanes["middle"].final]


def test_a_races_factors_multiply_to_its_speedup_while_it_runs_and_once_it_is_done() -> None:
    """Middle and right done, left still decoding: every ratio is one of decode rates (positions a compute
    second), not a finish-time ratio beside two rate ratios; once all are done, every ratio is of clocks."""
    def lane(decoded: int, clock: float, done: bool) -> Lane:
        return Lane("none", [step_event(unmasked=list(range(decoded)))], clock, done)

    left, middle, right = lane(100, 10.0, False), lane(60, 1.0, True), lane(50, 0.5, True)
    first, second = factors((left, middle, right))
    assert first == 6.0 and second == pytest.approx(100 / 60)  # 10, 60 and 100 positions a second
    assert first * second == pytest.approx(speedup(left, right, finished=False)) == pytest.approx(10.0)
    left.done = True
    assert factors((left, middle, right)) == (10.0, 2.0) and speedup(left, right, finished=True) == 20.0


def finished_lane(name: str, answer: list[int], eos: int = 99) -> Lane:
    """A finished lane whose answer is `answer`, then an end-of-text."""
    tokens = [*answer, eos]
    event = step_event(tokens=tokens, full=True, layer_rows=[1], compute_s=1.0,
                       totals=Totals(steps=1, tokens=len(answer), compute_s=1.0), done=True)
    return Lane(name, [event], 1.0, True, 1)


def test_the_race_marks_where_each_lanes_text_parts_from_the_left_lanes() -> None:
    decoding = decoding_of(DecodeConfig(gen_len=8, block_len=8))
    labels = (LaneLabel("left", "vanilla", decoding), LaneLabel("middle", "vanilla", decoding | {"threshold": 0.9}),
              LaneLabel("right", "entropy(tau=1.0, k=2)", decoding | {"threshold": 0.9}))
    lanes = (finished_lane("none", [5, 6, 7, 8]), finished_lane("none", [5, 6, 7, 8]),
             finished_lane("entropy", [5, 6, 9, 8, 10]))
    text = TokenText.from_pieces({5: "a", 6: "b", 7: "c", 8: "d", 9: "x", 10: "y", 99: "<end>"}, " ", 0, [99])
    page = parted_html(lanes, labels, text)
    said = re.sub("<[^>]+>", "", page.split('<div class="ec-legend">')[0])
    assert ("Middle: compared at EntropyCache's settings: the same text as the left lane (4 tokens). Right: "
            "EntropyCache: parts from the left lane's text at token 3 of 4; agreement 0.750.") in said
    left, middle, right = page.split('<div class="ec-col-head">')[1:]
    marked = [re.findall(r'class="ec-tok( ec-diff)?( ec-parted)?" title="token (\d+)"', column)
              for column in (left, middle, right)]
    assert marked[2] == [("", "", "1"), ("", "", "2"), (" ec-diff", " ec-parted", "3"), ("", "", "4"),
                         (" ec-diff", "", "5")]  # the right lane's: where it parts, and a token the left lacks
    assert marked[1] == [("", "", str(i)) for i in range(1, 5)]  # the middle lane's: no difference
    assert marked[0][2] == (" ec-diff", " ec-parted", "3")  # the left lane's, against EntropyCache's
    summary = summary_rows(lanes, labels)
    assert [row[-2:] for row in summary] == [["-", "-"], ["1.000", "same text"], ["0.750", 3]]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ([5, 6, 7, 8, 10, 9], "the left lane's 4 tokens, then 2 more; agreement 1.000."),
        ([5, 6, 7], "stops after the first 3 of the left lane's 4 tokens; agreement 0.750."),
        ([], "no text, where the left lane has 4 tokens; agreement 0.000."),
        ([9], "parts from the left lane's text at token 1 of 4; agreement 0.000."),
    ],
)
def test_a_text_that_holds_the_left_lanes_whole_or_stops_inside_it_is_said_so(answer, said) -> None:
    decoding = decoding_of(DecodeConfig(gen_len=8, block_len=8))
    labels = (LaneLabel("left", "vanilla", decoding), LaneLabel("right", "entropy(tau=1.0, k=2)", decoding))
    lanes = (finished_lane("none", [5, 6, 7, 8]), finished_lane("entropy", answer))
    text = TokenText.from_pieces({5: "a", 6: "b", 7: "c", 8: "d", 9: "x", 10: "y", 99: "<end>"}, " ", 0, [99])
    assert f"Right: EntropyCache: {said}" in re.sub("<[^>]+>", "", parted_html(lanes, labels, text))


def test_the_banner_names_the_lane_that_finished_first_and_the_papers_comparison_only_where_it_is() -> None:
    """A story (14 tokens) at tau 0: the middle lane, no cache with parallel decoding, beat EntropyCache, whose
    every step was full; the lanes are the paper's but the prompt is not."""
    one, parallel = (decoding_of(DecodeConfig(gen_len=256, block_len=32, threshold=t)) for t in (None, 0.9))
    labels = (LaneLabel("left", "vanilla", one), LaneLabel("middle", "vanilla", parallel),
              LaneLabel("right", "entropy(tau=0.0, k=2)", parallel))
    lanes = (Lane("none", [step_event()], 20.1, True, 3), Lane("none", [step_event()], 6.490, True, 1),
             Lane("entropy", [step_event()], 6.572, True, 2))
    text = re.sub("<[^>]+>", "", banner_html(lanes, Comparison(labels, 14))).replace("&times;", "×")
    assert text.startswith(
        "The middle lane (vanilla decoding (no cache), parallel decoding (threshold 0.9)) finished first, in 6.490 s; "
        "EntropyCache finished in 6.572 s, against 20.100 s for the left lane: 3.06x speedup (measured) = 3.10x from "
        "parallel decoding (left to middle) × 0.99x from the cache (middle to right)")
    assert ("EntropyCache with parallel decoding (threshold 0.9) against vanilla decoding (no cache, one token per "
            "step), on a 14-token prompt, shorter than the 256-token answer: the paper's comparison races a long "
            "prompt, where most rows of a pass are the prompt's, for a cache to reuse.") in text
    assert "the paper's comparison." not in text
    first = (replace(lanes[0], finish_rank=2), replace(lanes[1], finish_rank=3), replace(lanes[2], finish_rank=1))
    assert re.sub("<[^>]+>", "", banner_html(first, Comparison(labels, 389))).startswith(
        "EntropyCache finished first, in 6.572 s, against 20.100 s for the left lane: 3.06x speedup (measured)")
    assert "on a 389-token prompt: the paper's comparison." in banner_html(first, Comparison(labels, 389))
    slower = (replace(lanes[0], clock=5.0, finish_rank=1), lanes[1], lanes[2])
    assert re.sub("<[^>]+>", "", banner_html(slower, Comparison(labels, 14))).startswith(
        "The left lane (vanilla decoding (no cache, one token per step)) finished first, in 5.000 s; EntropyCache "
        "finished in 6.572 s: 0.76x speedup (measured)")


def test_at_the_end_of_a_race_without_a_partial_pass_the_time_panel_says_so_not_yet() -> None:
    full = step_event(full=True, forward_s=0.1, choice_s=0.0, compute_s=0.1, layer_rows=[40])
    decoding = decoding_of(DecodeConfig(gen_len=8, block_len=8))
    labels = [LaneLabel("left", "vanilla", decoding), LaneLabel("right", "entropy(tau=0.0, k=2)", decoding)]
    running = [Lane("none", [full], 0.1), Lane("entropy", [full, full], 0.2)]
    assert "One full pass over all 40 rows costs 100.0 ms; no lane has taken a partial pass yet." in time_html(
        running, labels, 40, None)
    done = [replace(lane, done=True, finish_rank=rank) for lane, rank in zip(running, (1, 2))]
    assert ("One full pass over all 40 rows costs 100.0 ms. No lane took a partial pass: every step of every lane "
            "recomputed every row, so the cache saved nothing.") in time_html(done, labels, 40, None)


def test_a_lane_whose_full_passes_ran_cheaper_than_the_mean_past_its_ceiling_is_said_why() -> None:
    """The ceiling is counted at every lane's mean full pass (90 ms here): EntropyCache's own one took 50 ms."""
    def pass_of(full: bool, seconds: float):
        return step_event(full=full, forward_s=seconds, choice_s=0.0, compute_s=seconds, layer_rows=[40 if full else 4])

    decoding = decoding_of(DecodeConfig(gen_len=8, block_len=8))
    vanilla = [pass_of(True, 0.1)] * 4
    ours = [pass_of(True, 0.05), *[pass_of(False, 0.01)] * 3]
    lanes = [Lane("none", vanilla, 0.4, True, 2), Lane("entropy", ours, 0.08, True, 1)]
    labels = [LaneLabel("left", "vanilla", decoding), LaneLabel("right", "entropy(tau=1.0, k=2)", decoding)]
    assert ("EntropyCache's schedule (1 of 4 steps full) allows at most 3.0x over running every step as a full pass "
            "at the lanes' mean cost (90.0 ms a pass, 0.360 s); its own full passes cost 50.0 ms, so it took 0.080 s, "
            "4.5x, 150% of that ceiling.") in time_html(lanes, labels, 40, None)
