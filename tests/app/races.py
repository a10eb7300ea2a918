"""How the app's tests run a race: the controls and inputs by name, the Race tab as the app builds it,
and the race's rendered stream without a session."""

from __future__ import annotations

import gradio as gr

from app.controls.declared import RUN_CONTROLS, VANILLA, raced_policies
from app.controls.run import RawRun, check_run
from app.race.decode import race_snapshots
from app.race.render import RaceRenderer
from app.race.tab import RaceTab, build_race_tab
from app.race.trace import TRACE_DIR
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL, ModelRegistry
from app.serving.sessions import RunBoard
from app.widgets.throttle import DEFAULT_THROTTLE_S
from evaluation.tasks.word_problems import make_split

PROMPT = make_split("test", 1)[0].prompt


def controls(**overrides) -> dict:
    values = {key: control.default for key, control in RUN_CONTROLS.items()}
    values.update(gen_len=32, block_len=16)
    values.update(overrides)
    return values


def race_run(registry, prompt: object = PROMPT, model: object = EMBEDDED_LABEL, policy: object = VANILLA,
             compared: dict | None = None, **numbers):
    """check_run as the Race tab calls it, with every control at its default unless given."""
    return check_run(registry, RawRun(prompt, model, policy, controls(**numbers), compared or {}), raced_policies(),
                     against_ours=True)


def run_args(prompt: object = PROMPT, model: object = EMBEDDED_LABEL, policy: object = VANILLA, **overrides) -> dict:
    """A Race run's inputs by name, as the panel sends them and an API client names them: `overrides` over
    controls() (a compared policy's own too, by its control name)."""
    return dict(prompt=prompt, model=model, policy=policy, **controls(**overrides))


def stream_race(model, tokenizer, params, *, throttle_s: float = DEFAULT_THROTTLE_S, trace_dir=TRACE_DIR):
    """One rendered Update per snapshot of the race (the Race tab's stream, without the session's run)."""
    renderer = RaceRenderer(model, tokenizer, params, trace_dir)
    for snap in race_snapshots(model, renderer.prompt_ids, params, throttle_s):
        yield renderer.update(snap)


def race_tab(registry: ModelRegistry, board: RunBoard, throttle_s: float = 0) -> RaceTab:
    """The Race tab as the app builds it."""
    with gr.Blocks():
        return build_race_tab(AppContext(registry, board, throttle_s=throttle_s))
