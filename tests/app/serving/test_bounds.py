"""Bounded work per visitor: a request's work against its budget (app/serving/budget.py), one decoding
and one waiting run per visitor per tab (app/serving/admission.py), turns round robin across visitors
(app/serving/turn_queue.py), a run nobody reads stopped at its next step (app/serving/listener.py)."""

from __future__ import annotations

import queue
import re
from types import SimpleNamespace

import pytest
from serving_stubs import STUB_MODEL, stub_context

from app.controls.declared import RUN_CONTROLS, raced_policies
from app.controls.presets import DEFAULT_PRESET
from app.controls.run import RawRun, check_run
from app.serving.admission import BUSY, PER_VISITOR, Admission, visitor_of
from app.serving.budget import (
    CPU_POSITIONS,
    CPU_SWEEP_DECODES,
    CPU_SWEEP_POSITIONS,
    GPU_FACTOR,
    Decode,
    check_decodes,
    check_sweep,
)
from app.serving.listener import MAX_UNREAD, unread, unread_check
from app.serving.registry import EMBEDDED_LABEL
from app.serving.runner import TabRunner, TabView
from app.serving.turn_queue import TurnQueue
from app.sweep.decode import MAX_KS, MAX_PROBLEMS, MAX_TAUS


def race(registry, prompt: str, **controls) -> object:
    values = {key: RUN_CONTROLS[key].default for key in RUN_CONTROLS} | DEFAULT_PRESET.controls() | controls
    return check_run(registry, RawRun(prompt, EMBEDDED_LABEL, DEFAULT_PRESET.policy, values, {}), raced_policies(),
                     against_ours=True)


def test_the_work_budget_names_its_limit_and_what_was_asked() -> None:
    assert check_decodes([Decode(1000, 200), Decode(1000, 400)], "cpu") == CPU_POSITIONS
    with pytest.raises(ValueError) as e:
        check_decodes([Decode(1000, 200), Decode(1001, 400)], "cpu")
    assert str(e.value) == ("This run asks for 600,400 positions of work (1000 positions x 200 steps + 1001 positions "
                            "x 400 steps); a run on the CPU may ask for at most 600,000. Shorten the prompt or the gen "
                            "length, or decode fewer steps.")
    assert check_decodes([Decode(1001, 400)] * GPU_FACTOR, "cuda") == 1001 * 400 * GPU_FACTOR
    short = Decode(80, 100)  # 8,000 positions of work a decode
    assert check_sweep([short] * 20, CPU_SWEEP_DECODES // 20, "cpu") == CPU_SWEEP_DECODES
    settings = 1 + MAX_TAUS * MAX_KS  # the largest sweep the controls allow
    with pytest.raises(ValueError, match=f"^This sweep asks for {MAX_PROBLEMS * settings} decodes; a sweep on the CPU "
                                         f"may ask for at most {CPU_SWEEP_DECODES}. List fewer"):
        check_sweep([short] * MAX_PROBLEMS, settings, "cpu")
    long = Decode(901, 512)  # a 389-token prompt at gen 512: within the decodes, not the work
    assert check_sweep([long] * 4, 8, "cuda") == 32
    with pytest.raises(ValueError) as e:
        check_sweep([short] + [long] * 19, 9, "cpu")  # 180 decodes: within their count
    assert str(e.value) == (f"This sweep asks for {9 * (8_000 + 19 * 901 * 512):,} positions of work (180 decodes, the "
                            "longest 901 positions x 512 steps); a sweep on the CPU may ask for at most "
                            f"{CPU_SWEEP_POSITIONS:,}. Shorten the prompts or the gen length, or list fewer values.")


def test_the_paper_race_on_the_long_example_fits_the_budget_and_a_maximum_race_is_refused(registry) -> None:
    choice = registry.choice(EMBEDDED_LABEL)
    long = choice.examples[choice.paper_example]
    assert len(race(registry, long).lanes) == 3  # within the budget
    prompt_len = len(registry.check_prompt(registry.choice(EMBEDDED_LABEL), long))
    with pytest.raises(ValueError) as e:
        race(registry, long, gen_len=512, block_len=32)
    asked = 3 * (prompt_len + 512) * 512
    assert str(e.value).startswith(f"This run asks for {asked:,} positions of work ({prompt_len + 512} positions x "
                                   f"512 steps + ") and "may ask for at most 600,000." in str(e.value)


def test_each_visitor_has_one_decoding_and_one_waiting_place_per_tab() -> None:
    admission = Admission()
    places = [admission.enter("race", "1.2.3.4", session) for session in ("s1", "s2")]
    with pytest.raises(ValueError, match=f"^{re.escape(BUSY)}$"):
        admission.enter("race", "1.2.3.4", "s3")  # a third session of the same address
    with pytest.raises(ValueError, match="^You already have 2 runs under way in this tab"):
        admission.enter("race", "1.2.3.4", None)  # no session at all
    replacing = admission.enter("race", "1.2.3.4", "s1")  # a new Run of s1 takes the place of s1's run
    other_tab, other_visitor = admission.enter("sweep", "1.2.3.4", "s3"), admission.enter("race", "5.6.7.8", "s3")
    assert admission.under_way("race", "1.2.3.4") == 3 and PER_VISITOR == 2
    for place in (*places, replacing, other_tab, other_visitor):
        admission.leave(place)
    assert admission.under_way("race", "1.2.3.4") == 0
    admission.leave(admission.enter("race", "1.2.3.4", "s3"))  # free again


def test_a_visitor_is_the_address_the_proxy_saw_never_one_a_client_wrote() -> None:
    request = SimpleNamespace(headers={"x-forwarded-for": "6.6.6.6, 10.0.0.7"}, client=SimpleNamespace(host="10.0.0.1"))
    assert visitor_of(request, proxied=True) == "10.0.0.7"  # the entry the proxy added: the client's own go first
    assert visitor_of(request, proxied=False) == "10.0.0.1"  # no proxy: the header is the client's own word
    assert visitor_of(SimpleNamespace(headers={}, client=None), proxied=True) == ""
    assert visitor_of(None) == ""


def test_turns_go_round_robin_across_visitors() -> None:
    q = TurnQueue()
    a1, a2, a3 = (q.join(visitor="a") for _ in range(3))  # a's sweep, one ticket per decode
    b1, c1 = q.join(visitor="b"), q.join(visitor="c")
    assert q.wait(a1, 0)
    assert [q.ahead(t) for t in (b1, c1, a2, a3)] == [1, 2, 3, 4]  # b and c wait for one turn of a's, not three
    held = []
    for _ in range(5):
        holder = next(t for t in (a1, a2, a3, b1, c1) if q.wait(t, 0))
        held.append(holder)
        q.leave(holder)
    assert held == [a1, b1, c1, a2, a3] and len(q) == 0
    x1, x2 = q.join(visitor="x"), q.join(visitor="x")
    y1 = q.join(visitor="y")
    q.leave(x1)
    assert q.wait(y1, 0) and q.ahead(x2) == 1  # x held last: y goes first
    y2 = q.join(visitor="y")
    q.leave(y1)
    assert q.wait(x2, 0) and q.ahead(y2) == 1


class Message(TabView):
    def __init__(self, decode) -> None:
        super().__init__(STUB_MODEL, "status")
        self.decode, self.ended = decode, False

    def start(self, model, tokenizer):
        return {"status": "start"}, SimpleNamespace(snapshots=lambda m, t, should_stop: self.decode(should_stop))

    def show(self, snapshot):
        return {"status": f"step {snapshot}"}

    def end(self):
        self.ended = True
        return {"status": "done"}


def test_a_run_nobody_reads_stops_at_its_next_step_and_gives_back_its_turn_and_place() -> None:
    ctx = stub_context()
    steps = []

    def decode(should_stop):
        for i in range(100):
            steps.append(i)
            yield i

    ctx.forgotten = lambda session: len(steps) > 3  # the reader falls behind after 3 steps
    view = Message(decode)
    out = list(TabRunner(ctx, "status", tab="race").run(SimpleNamespace(session_hash="s", client=None), lambda: view))
    assert [o["status"] for o in out] == ["start", "step 0", "step 1", "step 2"]  # no end, no 'Stopped.'
    assert steps == [0, 1, 2, 3] and not view.ended
    assert len(ctx.turn_queue("cpu")) == 0 and ctx.admission.under_way("race", "") == 0 and len(ctx.board) == 0


def test_unread_updates_are_counted_from_the_apps_queue() -> None:
    messages = queue.Queue()
    blocks = SimpleNamespace(_queue=SimpleNamespace(pending_messages_per_session={"s": messages}))
    for _ in range(MAX_UNREAD):
        messages.put("update")
    assert unread(blocks, "s") == MAX_UNREAD and not unread_check(blocks)("s")
    messages.put("update")
    assert unread_check(blocks)("s") and unread(blocks, "other") == 0 and unread(object(), "s") == 0


def test_the_readme_states_the_limits_as_declared() -> None:
    """The README's 'What a visitor may ask for' says each limit in the words of its declaration."""
    from pathlib import Path

    from app.race.replay_store import MAX_REPLAYS, MAX_STORED_BYTES
    from app.serving.admission import MAX_QUEUED
    from app.widgets.lane_plots import MAX_ROW_BANDS

    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    for phrase in (f"*Runs under way*: {PER_VISITOR} per visitor per tab",
                   f"Gradio's queue holds {MAX_QUEUED} requests",
                   f"at most {CPU_POSITIONS:,} on the CPU and {CPU_POSITIONS * GPU_FACTOR:,} on a GPU",
                   f"a sweep at most {CPU_SWEEP_DECODES} decodes ({CPU_SWEEP_DECODES * GPU_FACTOR:,} on a GPU) and "
                   f"{CPU_SWEEP_POSITIONS:,} positions of work ({CPU_SWEEP_POSITIONS * GPU_FACTOR:,} on a GPU)",
                   f"stops once {MAX_UNREAD} are waiting", f"at most {MAX_STORED_BYTES >> 20} MB",
                   f"and {MAX_REPLAYS} replays, one per session", f"longer than {MAX_ROW_BANDS:,} positions"):
        assert phrase in readme, phrase


def test_the_long_chat_examples_fit_the_gpu_budget_before_their_tokenizer_is_loaded() -> None:
    """Counted at a token a byte (the registry's bound before LLaDA's or Dream's tokenizer is at hand), the
    paper's comparison (three lanes, one token per step at most) on each long example is within the budget."""
    from app.serving.long_prompts import LONG_PROMPTS
    from app.serving.registry import CHAT_FRAME_TOKENS

    for prompt in LONG_PROMPTS:
        positions = len(prompt.text.encode("utf-8")) + CHAT_FRAME_TOKENS + prompt.gen_len
        assert check_decodes([Decode(positions, prompt.gen_len)] * 3, "cuda") <= CPU_POSITIONS * GPU_FACTOR
