"""The controls panel (app/controls/panel.py): sliders that hand values on as sent, and the settings an
example sets for its model and task."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
from races import race_tab

import app.controls.panel
from app.controls.panel import raw_slider
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL, ModelChoice
from app.serving.sessions import RunBoard
from app.widgets.inert import inert


def test_sliders_hand_values_on_as_sent_and_write_no_stub_file() -> None:
    slider = raw_slider(0, 12, value=0.5)
    assert slider.preprocess("abc") == "abc" and slider.preprocess(2**40) == 2**40 and slider.preprocess(None) is None
    assert slider.get_block_name() == "slider"  # drawn by gr.Slider's own browser component
    assert not list(Path(app.controls.panel.__file__).parent.glob("*.pyi"))  # gradio writes one per component subclass
    # a session's own copy of a component, which Gradio makes from its class when a handler updates it
    copy = type(slider)(**{**slider.constructor_args, "render": False})
    assert copy.preprocess("abc") == "abc" and copy.get_block_name() == "slider"


def test_an_example_sets_the_decode_settings_its_model_declares_for_its_task(registry) -> None:
    """The embedded model declares temperature 0.7 for stories: its first example, a story, opens the Drift
    panel at 0.7; a word problem after it is greedy again; every example sets the lengths, to its own (a
    long chat prompt: the paper's 256 or 512, block 32) or else the model's; a chat model declares no
    temperature. The Race opens on the paper's comparison, on the model's long example."""
    from app.controls.panel import declared_controls, example_controls
    from app.drift.tab import build_drift_tab
    from app.serving.examples import chat_examples

    choice = registry.choice(EMBEDDED_LABEL)
    tasks = ["stories" if e.startswith("tell a story") else "words" for e in choice.examples]
    assert tasks[0] == "stories" and "words" in tasks
    keys = declared_controls(registry)
    assert keys == ["block_len", "gen_len", "temperature"]
    lengths = {"gen_len": choice.gen_len, "block_len": choice.block_len}
    assert [example_controls(choice, i, keys) for i in range(len(tasks))] == [
        {**lengths, "temperature": 0.7 if task == "stories" else 0.0} for task in tasks]
    # a model that declares nothing resets what another one declared: switching to it is greedy again
    chat = ModelChoice("chat", "x", "cuda", 128, 32, chat_examples())
    long, short = chat.paper_example, len(chat.examples) - 1
    assert example_controls(chat, long, keys) == {"gen_len": 256, "block_len": 32, "temperature": 0.0}
    assert example_controls(chat, short, keys) == {"gen_len": 128, "block_len": 32, "temperature": 0.0}
    with gr.Blocks():
        drift = build_drift_tab(AppContext(registry, RunBoard()))
    assert drift.inputs.controls["temperature"].value == 0.7 and drift.inputs.prompt.value == choice.examples[0]
    race = race_tab(registry, RunBoard())
    assert race.inputs.prompt.value == choice.examples[choice.paper_example] and "4 worked examples" in (
        choice.example_list[choice.paper_example].title)
    assert race.inputs.policy.value == "vanilla" and race.inputs.controls["threshold"].value == 0.9
    assert race.inputs.controls["temperature"].value == 0.0


def test_a_prompt_that_asks_after_worked_examples_shows_its_question_first_and_folds_the_rest(registry) -> None:
    """The Race opens on the 4-shot word problem: its question above the box, the box folded; the Drift panel on a
    story, which is its own question: shown whole. Every long chat prompt asks its question in its last paragraph."""
    from app.controls.panel import FOLDED, OPEN, prompt_view
    from app.drift.tab import build_drift_tab
    from app.serving.examples import chat_examples

    choice = registry.choice(EMBEDDED_LABEL)
    long = choice.example_list[choice.paper_example]
    assert long.text.endswith(long.question) and "question : " in long.text and "question" not in long.question
    race = race_tab(registry, RunBoard())
    assert race.inputs.question.value == f"**The question**, last in the prompt: {inert(long.question)}"
    assert (race.inputs.fold.open, race.inputs.fold.label) == (False, FOLDED)
    with gr.Blocks():
        drift = build_drift_tab(AppContext(registry, RunBoard()))
    assert drift.inputs.question.value == "" and (drift.inputs.fold.open, drift.inputs.fold.label) == (True, OPEN)
    assert prompt_view(choice.example_list[0]) == ("", False) and prompt_view(None) == ("", False)
    shown = race.inputs.showing(choice.example_list[0])  # a story clicked: the box opens, no question line
    assert shown[race.inputs.question] == "" and shown[race.inputs.fold].open is True
    for example in (e for e in chat_examples() if e.long):
        assert example.question and example.text.rstrip().rsplit("\n\n", 1)[-1].startswith(example.question)
    assert [e.question for e in chat_examples() if not e.long] == ["", "", "", ""]
