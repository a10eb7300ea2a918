"""The Race tab: the compared lane and EntropyCache decode one prompt on one shared compute clock,
streamed into lanes of panels (speed, text, entropy trace, recomputed rows), with where each lane's
time goes, then the results.

The compared lane is vanilla decoding (the paper's baseline: no cache, one token per step) or any
policy at EntropyCache's settings; where its settings differ from EntropyCache's, a middle lane runs
the compared policy at EntropyCache's settings, so the speedup splits into two measured factors.
Presets (app/controls/presets.py) set and race the paper's comparison and the cache alone. The handler
checks its input once (app/controls/run.py) and runs through the tab runner
(app/serving/runner.py); the race itself is app/race/decode.py, drawn by app/race/render.py into the
panels of app/race/panels.py.
"""

from __future__ import annotations

from functools import partial

import gradio as gr

from app.controls.declared import RUN_CONTROLS, raced_policies
from app.controls.panel import ControlsTab, Inputs, Opening, build_inputs, press, wire_inputs
from app.controls.presets import DEFAULT_PRESET, PRESETS, Preset
from app.race.decode import race_snapshots
from app.race.panels import build_race_panels
from app.race.render import RaceRenderer
from app.race.replay_panel import build_replay_panel
from app.serving.context import AppContext, WarmShape
from app.serving.registry import ModelRegistry
from app.serving.runner import Outputs
from app.widgets.banner import refusing
from app.widgets.intro import tab_intro

INTRO = """# EntropyCache: a decode race
Two decoders answer the same prompt, side by side, on one clock of measured compute time: the faster
finishes first. **Left:** *vanilla* decoding, the paper's baseline (no cache). **Right:** EntropyCache,
which reuses its cache until a step decodes an uncertain token. Press a preset (or Run) to watch a race."""
HOW_IT_WORKS = """Both lanes unmask the same prompt with the same seed. Vanilla decoding recomputes every row
at every step, one token per step (the left lane may race another cache instead). EntropyCache recomputes the
whole cache only after a step that decoded an uncertain token (max entropy above *tau*), here with
parallel decoding (every token above a confidence threshold unmasked at once). When the two decode at
different settings, a **middle** lane runs the compared policy at EntropyCache's settings, so the
speedup splits into what parallel decoding gives and what the cache gives. Compute time is each step's
own work (on a CPU, the time the decoding thread spent on its core): drawing this page and other
visitors' runs never count. A cache pays where the prompt is long: the presets race a long few-shot
prompt, as the paper does."""


class RaceTab(ControlsTab, name="race", renderer=RaceRenderer, decode=race_snapshots, offered=raced_policies(),
              against_ours=True):
    """The compared lane (the pick) against EntropyCache."""


def preset_opening(preset: Preset) -> Opening:
    """The inputs as `preset` sets them, on a model's long example."""
    return Opening(preset.policy, lambda choice: choice.paper_example, preset.controls())


def preset_shape(preset: Preset) -> WarmShape:
    """The race `preset` sets up, as the warm-up readies it ahead: on a model's long example."""
    values = preset.controls()
    return WarmShape(preset_opening(preset).example, values["gen_len"], values["block_len"], preset.lanes)


def preset_inputs(registry: ModelRegistry, inputs: Inputs, preset: Preset, label: str) -> Outputs:
    """What a preset's button sets: the compared lane, every control, and the model's long example."""
    choice = registry.choice(label)
    values = preset.controls()
    example = choice.example_list[choice.paper_example]
    return {inputs.prompt: example.text, **inputs.showing(example), inputs.policy: preset.policy,
            **{inputs.controls[key]: values[key] for key in RUN_CONTROLS}}


def preset_buttons() -> dict[str, gr.Button]:
    """A button per preset, with what it races, above the inputs (call inside the Race tab)."""
    buttons = {}
    with gr.Row(elem_id="presets"):
        for preset in PRESETS:
            with gr.Column(min_width=240):
                buttons[preset.key] = gr.Button(preset.name, size="sm", elem_id=f"preset-{preset.key}")
                gr.Markdown(preset.words, elem_classes="ec-note")
    return buttons


def wire_presets(registry: ModelRegistry, inputs: Inputs, buttons: dict[str, gr.Button], status: gr.HTML) -> None:
    """Each preset's button (by key) sets the inputs as the preset says (a model not offered: said in `status`),
    then presses Run: a preset is a race to watch, and Run's own way (the session's old run cancelled, the
    race in view) runs it."""
    shown = [inputs.prompt, inputs.question, inputs.fold]
    outputs = [*shown, inputs.policy, *(inputs.controls[key] for key in RUN_CONTROLS), status]
    for preset in PRESETS:
        apply = refusing(status, partial(preset_inputs, registry, inputs, preset))
        set_inputs = buttons[preset.key].click(apply, inputs.model, outputs, api_visibility="private")
        set_inputs.then(None, js=press(inputs.run), queue=False, api_visibility="private")


def build_race_tab(ctx: AppContext) -> RaceTab:
    """The tab's layout and events (call inside a gr.Tab)."""
    tab_intro(INTRO, HOW_IT_WORKS, "how-it-works")
    buttons = preset_buttons()
    inputs = build_inputs(ctx.registry, policies=RaceTab.offered, policy_label="Compared lane (left panel)",
                          opening=preset_opening(DEFAULT_PRESET))
    panels = build_race_panels()
    wire_presets(ctx.registry, inputs, buttons, panels.status)
    tab = RaceTab(ctx, inputs, panels)
    ctx.warm_shapes = (preset_shape(DEFAULT_PRESET),)  # the race a visitor finds on the page starts at once
    wire_inputs(inputs, ctx, tab.run, panels.outputs(), "run", panels.status)
    build_replay_panel(panels, inputs.run, forgotten=lambda session: ctx.forgotten(session))  # set once served
    return tab
