"""The Race tab's handler (app/race/tab.py) refuses, in the status line and before any run: a prompt the
model cannot read, and values past the sliders' bounds."""

from __future__ import annotations

import html
import os
import re
from types import SimpleNamespace

import pytest
from races import race_tab, run_args

from app.serving.registry import EMBEDDED_LABEL
from app.serving.sessions import RunBoard

MODEL = os.environ.get("ENTROPYCACHE_MODEL")  # None: the shipped embedded model


UNREADABLE = [  # (prompt, the words the embedded model does not know)
    ("<|mask|> mia has 7 marbles . how many marbles does mia have now ?", "'<|', 'mask', '|>'"),
    ("What is 12 plus 7?", "'What', 'plus'"),
]


@pytest.mark.skipif(MODEL is not None, reason="the words are unknown to the embedded model's vocabulary")
@pytest.mark.parametrize(("prompt", "words"), UNREADABLE)
def test_a_prompt_the_model_cannot_read_is_refused_before_any_run(registry, prompt: str, words: str) -> None:
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    out = list(h.run(**run_args(prompt), request=SimpleNamespace(session_hash="me")))
    message = html.unescape(refusal(out, h.panels.status))
    assert words in message and registry.choice(EMBEDDED_LABEL).trained_on in message and len(board) == 0


def refusal(out: list[dict], status) -> str:
    """A refused run's one answer: the status line alone (the other panels stay as they were), as HTML."""
    assert len(out) == 1 and list(out[0]) == [status] and 'class="ec-banner ec-refused"' in out[0][status]
    return out[0][status]


OUT_OF_RANGE = [
    (dict(gen_len=100000), "gen length must be an integer in \\[1, 512\\], got 100000"),
    (dict(temperature=-1), "temperature must be a number in \\[0, 2\\], got -1"),
    (dict(tau=1e9), "tau \\(EntropyCache\\) must be a number in \\[0, 12\\], got 1000000000.0"),
    (dict(steps=2, threshold=0.9), "Set steps to 0 or the parallel-decoding threshold to 0"),
]


@pytest.mark.parametrize("bad, message", OUT_OF_RANGE, ids=[str(b) for b, _ in OUT_OF_RANGE])
def test_the_run_handler_itself_refuses_out_of_range_values(registry, bad: dict, message: str) -> None:
    """What an API client gets past Gradio's slider bounds still meets the handler's own checks."""
    board = RunBoard()
    h = race_tab(registry, board, throttle_s=0)
    out = list(h.run(**run_args(**bad), request=SimpleNamespace(session_hash="me")))
    assert re.search(message, html.unescape(refusal(out, h.panels.status)))
    assert len(board) == 0  # refused before any run was registered


def test_the_race_tab_hands_the_context_the_race_a_visitor_finds_on_the_page(registry) -> None:
    """The warm-up readies the Race's opening preset ahead (app/serving/context.py warm_up), on the model's
    long example: the tab says which, so serving needs no preset of its own."""
    from app.controls.presets import DEFAULT_PRESET

    tab = race_tab(registry, RunBoard())
    (shape,) = tab.ctx.warm_shapes
    choice = registry.choice(EMBEDDED_LABEL)
    assert (shape.gen_len, shape.block_len, shape.lanes) == (256, 32, 3) == (
        DEFAULT_PRESET.controls()["gen_len"], DEFAULT_PRESET.controls()["block_len"], DEFAULT_PRESET.lanes)
    assert shape.example(choice) == choice.paper_example


def test_a_race_looks_its_model_up_once(registry, monkeypatch) -> None:
    """The model a run names is checked and looked up once (check_run); loading it, warming it up and
    checking the prompt take the choice found then."""
    looked_up = []
    choice = registry.choice
    tab = race_tab(registry, RunBoard())
    monkeypatch.setattr(registry, "choice", lambda label: looked_up.append(label) or choice(label))
    out = list(tab.run(**run_args(), request=SimpleNamespace(session_hash="once")))
    assert out[-1].get(tab.panels.trace) and looked_up == [EMBEDDED_LABEL]
