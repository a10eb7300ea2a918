"""The input panel a Race or Drift tab starts with: prompt, example prompts, model picker, Run/Stop, and
a slider per control; and the check of the Run it sends (ControlsTab, a PanelTab: app/serving/panel_tab.py).

A slider's range is its control's (app/controls/declared.py), which the handler checks again: the HTTP
API accepts any value, and the sliders hand it on as sent (raw_slider; in the page a value typed out of
the range stays as typed, KEEP_TYPED_JS), so the message a bad value gets is the handler's, naming the
control and what it allows. `prefix` keeps element ids unique when two
tabs each have a panel.
"""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import gradio as gr

from app.controls.declared import DECODE_CONTROLS, PEER_CONTROLS, RUN_CONTROLS, Control, compared_policies
from app.controls.run import RawRun, Run, check_run
from app.serving.context import AppContext
from app.serving.examples import Example
from app.serving.panel_tab import PanelTab
from app.serving.registry import ModelChoice, ModelRegistry
from app.serving.runner import Outputs
from app.widgets.banner import refusing
from app.widgets.inert import inert
from core.refusal import shown

C = TypeVar("C", bound=gr.components.Component)
CONTROLS_PER_ROW = 4  # the sliders' rows, in the controls' declared order


# A slider's number box puts a typed value into the slider's range when it loses the focus (Gradio's
# frontend): -5 typed for tau would run as 0, unsaid. Stopping that blur keeps the value as typed, so
# Run sends it and the handler refuses it by name (Control.check), as it refuses an API client's.
KEEP_TYPED_JS = """
() => {
  window.addEventListener('blur', (ev) => {
    const box = ev.target;
    const slider = box instanceof HTMLInputElement && box.type === 'number'
      && (box.getAttribute('aria-label') || '').startsWith('number input for');
    if (!slider || Number.isNaN(box.valueAsNumber)) return;
    const low = box.min === '' ? -Infinity : Number(box.min), high = box.max === '' ? Infinity : Number(box.max);
    if (box.valueAsNumber < low || box.valueAsNumber > high) ev.stopImmediatePropagation();
  }, true);
}
"""


def raw_slider(*args: Any, **kwargs: Any) -> gr.Slider:
    """A gr.Slider whose value reaches the handler as the client sent it.

    gr.Slider's own preprocess checks the bounds first and answers an API client with a message that
    names no control ('Value 1099511627776 is greater than maximum value 2147483647.'), or fails on a
    string or None with Gradio's generic error. Every handler that takes a slider checks its value
    itself (Control.check, app/controls/declared.py), so nothing unchecked gets through."""
    return as_sent(gr.Slider(*args, **kwargs))


def as_sent(component: C) -> C:
    """`component`, its value handed to the handler as the client sent it (no preprocess check).

    For a dropdown or a radio, Gradio's own check of the choices answers outside the tab's status line,
    in its words; every handler that takes one checks it itself (app/serving/sent.py check_choice).
    The component becomes an instance of its class's raw twin: a session's copy of a component (which
    Gradio makes from the class whenever a handler updates it) stays raw too."""
    component.__class__ = _raw_twin(type(component))
    return component


_RAW_TWINS: dict[type, type] = {}


def _raw_twin(cls: type) -> type:
    """`cls` with a preprocess that hands the payload on, drawn by the frontend as `cls` (a template, in
    Gradio's word). Made by ABCMeta.__new__ rather than a class statement: Gradio's ComponentMeta.__new__
    writes a .pyi stub beside the source of every component class it makes."""
    if cls not in _RAW_TWINS:
        namespace = {"is_template": True, "preprocess": _hand_on, "__module__": __name__}
        _RAW_TWINS[cls] = ABCMeta.__new__(type(cls), f"Raw{cls.__name__}", (cls,), namespace)
    return _RAW_TWINS[cls]


def _hand_on(self: gr.components.Component, payload: Any) -> Any:
    return payload


def bounded_slider(control: Control, value: float | str | None = None, prefix: str = "") -> gr.Slider | gr.Dropdown:
    """A control's slider: the range the handler enforces again (integers are checked there, not
    rounded here), its label and help. A setting chosen by name (a schedule) gets a dropdown of its
    choices, which the handler checks again too."""
    if control.param.choices:
        value = control.default if value is None else value
        return as_sent(gr.Dropdown(list(control.param.choices), value=value, label=control.label,
                                   info=control.info or None, elem_id=f"{prefix}ctl-{control.key}"))
    low, high = control.slider_range
    step = 1 if control.param.kind is int else 0.01
    value = control.default if value is None else value
    return raw_slider(low, high, value=value, step=step, label=control.label, info=control.info or None,
                      elem_id=f"{prefix}ctl-{control.key}")


# The controls an example prompt may set: its lengths (a long prompt is decoded at the paper's) and
# what its model declares for its task (a story's temperature).
EXAMPLE_SET = tuple(DECODE_CONTROLS)
LENGTHS = ("gen_len", "block_len")


def declared_controls(registry: ModelRegistry) -> list[str]:
    """The controls picking an example sets: the lengths, and those some example of a model of the
    registry declares."""
    declared = {key for label in registry.labels for example in registry.choice(label).example_list
                for key in example.settings if key in EXAMPLE_SET}
    return sorted(declared | set(LENGTHS))


def example_controls(choice: ModelChoice, index: int, keys: list[str]) -> dict[str, int | float]:
    """The controls `keys` (declared_controls) as picking example `index` sets them: to what the
    example declares, else the lengths to the model's and the rest to their defaults (a word problem
    after a story is greedy again, a short prompt after a long one takes the model's lengths)."""
    declared = choice.example_list[index].settings if index < len(choice.example_list) else {}
    defaults = {"gen_len": choice.gen_len, "block_len": choice.block_len}
    return {key: declared[key] if declared.get(key) is not None else defaults.get(key, DECODE_CONTROLS[key].default)
            for key in keys}


@dataclass(frozen=True)
class Opening:
    """What a panel's inputs hold before a visitor touches them: the policy picked, the example in the
    prompt box (by index, for a model choice), and controls set over what that example sets."""

    policy: str | None = None  # None: the picker's first
    example: Callable[[ModelChoice], int] = lambda choice: 0
    controls: dict = field(default_factory=dict)


@dataclass
class Inputs:
    prompt: gr.Textbox
    question: gr.Markdown  # an example's question, shown above its folded prompt (prompt_view)
    fold: gr.Accordion  # the prompt box, folded while it holds an example with a question
    examples: gr.Dataset
    model: gr.Dropdown
    policy: gr.Dropdown
    run: gr.Button
    stop: gr.Button
    controls: dict[str, gr.Slider]  # by RUN_CONTROLS key
    peer_controls: dict[str, gr.Slider]  # by PEER_CONTROLS key
    peer_groups: dict[str, gr.Row]  # each compared policy's sliders, shown while it is picked
    opening: Opening  # which example a change of model puts in the prompt box

    def for_run(self) -> dict[str, gr.components.Component]:
        """What a Run sends, by the name the handler and the HTTP API know each by (RawRun.of)."""
        return {"prompt": self.prompt, "model": self.model, "policy": self.policy, **self.controls,
                **self.peer_controls}

    def per_model(self) -> list[gr.components.Component]:
        """What a change of model resets: its examples, the prompt, how it is shown and what an example sets."""
        return [self.examples, *self.per_example()]

    def per_example(self) -> list[gr.components.Component]:
        """What picking an example prompt sets: the prompt, how it is shown, and the controls it may set
        (example_controls)."""
        return [self.prompt, self.question, self.fold, *(self.controls[key] for key in EXAMPLE_SET)]

    def showing(self, example: Example | None) -> Outputs:
        """The question line and the prompt's fold for `example` in the prompt box (None: a prompt of the
        visitor's own), as prompt_view says."""
        question, folded = prompt_view(example)
        return {self.question: question, self.fold: gr.Accordion(open=not folded, label=FOLDED if folded else OPEN)}


FOLDED = "The whole prompt: what comes before the question, then the question (open to read or edit it)"
OPEN = "Prompt"
CSS = """
.ec-question:not(:has(p)) { display: none; }
.ec-question p { font-size: 15px; margin: 0; }
"""


def prompt_view(example: Example | None) -> tuple[str, bool]:
    """(the question line, whether the prompt box is folded) for `example` in the box: one that asks a
    question after worked examples or a passage shows that question first and folds the wall of text
    before it; any other prompt is shown whole, with no line above it."""
    if example is None or not example.question:
        return "", False
    return f"**The question**, last in the prompt: {inert(example.question)}", True


def example_samples(choice: ModelChoice) -> list[list[str]]:
    """The examples list's rows: each example's title (a long prompt's full text would fill the page)."""
    return [[example.title] for example in choice.example_list]


def build_inputs(registry: ModelRegistry, prefix: str = "", policies: list[str] | None = None,
                 policy_label: str = "Compared policy (left panel)", run_label: str = "Run",
                 opening: Opening = Opening()) -> Inputs:
    """`policies`: the policy picker's choices (default: compared_policies()); `opening`: what the
    inputs hold at first (default: the first policy, the first example)."""
    policies = compared_policies() if policies is None else policies
    first = registry.choice(registry.labels[0])
    index = opening.example(first)
    question_line, folded = prompt_view(first.example_list[index] if index < len(first.example_list) else None)
    with gr.Row():
        with gr.Column(scale=3):
            question = gr.Markdown(question_line, elem_id=f"{prefix}prompt-question", elem_classes=["ec-question"])
            with gr.Accordion(FOLDED if folded else OPEN, open=not folded, elem_id=f"{prefix}prompt-fold") as fold:
                # No max_length: the box would cut a longer paste silently; the handler refuses it, saying why.
                prompt = gr.Textbox(first.examples[index], label="Prompt", show_label=False, lines=3, max_lines=12,
                                    elem_id=f"{prefix}prompt")
            examples = gr.Dataset(components=[prompt], samples=example_samples(first), type="index",
                                  label="Example prompts for this model", elem_id=f"{prefix}examples")
        with gr.Column(scale=2):
            model = as_sent(gr.Dropdown(registry.labels, value=first.label, label="Model"))
            policy = as_sent(gr.Dropdown(policies, value=opening.policy or policies[0], label=policy_label,
                                         elem_id=f"{prefix}policy"))
            with gr.Row():
                run = gr.Button(run_label, variant="primary", elem_id=f"{prefix}run-btn")
                stop = gr.Button("Stop", variant="stop", elem_id=f"{prefix}stop-btn")
    defaults = example_controls(first, index, declared_controls(registry)) | opening.controls
    with gr.Accordion("Controls", open=True):
        controls = {}
        keys = list(RUN_CONTROLS)
        for first in range(0, len(keys), CONTROLS_PER_ROW):
            with gr.Row():
                controls.update({key: bounded_slider(RUN_CONTROLS[key], defaults.get(key), prefix)
                                 for key in keys[first:first + CONTROLS_PER_ROW]})
        peer_controls, peer_groups = _peer_sliders(prefix, policies, opening.policy or policies[0])
    return Inputs(prompt, question, fold, examples, model, policy, run, stop, controls, peer_controls, peer_groups,
                  opening)


def _peer_sliders(prefix: str, policies: list[str], picked: str) -> tuple[dict[str, gr.Slider], dict[str, gr.Row]]:
    """One row of sliders per compared policy that has parameters, visible while that policy is picked.
    Every peer control gets a slider (the handler takes them all); those of policies the picker does
    not offer stay hidden."""
    sliders, groups = {}, {}
    for name in compared_policies():
        own = [control for control in PEER_CONTROLS.values() if control.policy == name]
        if own:
            with gr.Row(visible=name == picked, elem_id=f"{prefix}peer-{name}") as groups[name]:
                sliders.update({control.key: bounded_slider(control, prefix=prefix) for control in own})
    return sliders, groups


def scroll_to(block: gr.blocks.Block) -> str:
    """A page script that scrolls `block` (by its element id) to the top of the screen."""
    return f"() => {{ document.getElementById({block.elem_id!r})?.scrollIntoView({{block: 'start'}}); }}"


def press(button: gr.Button) -> str:
    """A page script that presses `button` (by its element id), as a visitor's click does."""
    return f"() => {{ document.getElementById({button.elem_id!r})?.click(); }}"


def wire_run(run_button: gr.Button, stop_button: gr.Button, ctx: AppContext, run: Callable,
             inputs: dict[str, gr.components.Component], outputs: list, api_name: str, status: gr.HTML):
    """Connect a tab's Run and Stop; returns the run event (its Stop cancels it). `run` takes `inputs` by
    name, as keyword arguments (the HTTP API's parameter names), and Gradio's request.

    A new Run first cancels the session's run in flight (queue=False: at once, even with every slot
    busy), then queues the new one; "multiple" lets Run through while the old run is pending. In the
    page, Run also scrolls the status line to the top of the screen, with what the run draws under it."""
    run_button.click(None, js=scroll_to(status), queue=False, api_visibility="private")
    cancel_old = run_button.click(ctx.cancel_previous, None, None, queue=False, trigger_mode="multiple",
                                  api_visibility="private")
    run_event = cancel_old.then(run, inputs_kwargs=inputs, outputs=outputs, api_name=api_name, trigger_mode="multiple")
    stop_button.click(ctx.stop, None, status, queue=False, cancels=[run_event], api_visibility="private")
    return run_event


def wire_inputs(ins: Inputs, ctx: AppContext, run: Callable, outputs: list, api_name: str, status: gr.HTML):
    """Connect a panel: Run and Stop (wire_run), a change of model, a click on an example prompt."""
    registry = ctx.registry
    declared = declared_controls(registry)

    def example_inputs(c: ModelChoice, index: int) -> Outputs:
        """The prompt box, how it is shown, and the declared controls as example `index` of model `c` sets them."""
        return {ins.prompt: c.examples[index], **ins.showing(c.example_list[index]),
                **{ins.controls[key]: value for key, value in example_controls(c, index, declared).items()}}

    def model_inputs(label: object) -> Outputs:
        c = registry.choice(label)
        return {ins.examples: gr.Dataset(samples=example_samples(c))} | example_inputs(c, ins.opening.example(c))

    def pick_example(index: object, label: object) -> Outputs:
        """The example clicked (an index the list does not have is refused: only a client sends one)."""
        c = registry.choice(label)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(c.examples):
            raise ValueError(f"There is no example {shown(index)}: pick one of the {len(c.examples)} listed.")
        return example_inputs(c, index)

    def show_own_controls(policy: str) -> list:
        return [gr.Row(visible=name == policy) for name in ins.peer_groups]

    run_event = wire_run(ins.run, ins.stop, ctx, run, ins.for_run(), outputs, api_name, status)
    ins.model.change(refusing(status, model_inputs), ins.model, [*ins.per_model(), status], api_visibility="private")
    ins.policy.change(show_own_controls, ins.policy, list(ins.peer_groups.values()), api_visibility="private")
    ins.examples.click(refusing(status, pick_example), [ins.examples, ins.model], [*ins.per_example(), status],
                       api_visibility="private")
    # Typing makes the prompt the visitor's own: the question line above it goes (in the page, no round trip).
    ins.prompt.input(None, None, ins.question, js="() => ''", queue=False, api_visibility="private")
    return run_event


class ControlsTab(PanelTab):
    """A PanelTab whose input panel is build_inputs': what a Run sends is checked once by check_run. A
    tab declares its parts in its class statement: PanelTab's (name, renderer, decode), what its policy
    picker offers and whether EntropyCache races the pick; a tab lacking one fails where it is declared,
    not at its first run."""

    offered: ClassVar[list[str]]
    against_ours: ClassVar[bool]

    def __init_subclass__(cls, *, name: str, renderer: Callable, decode: Callable, offered: list[str],
                          against_ours: bool, **rest: Any) -> None:
        super().__init_subclass__(**rest)
        cls.name, cls.renderer, cls.decode = name, renderer, staticmethod(decode)
        cls.offered, cls.against_ours = offered, against_ours

    def checked(self, sent: dict) -> Run:
        """`sent`: the panel's inputs by name (Inputs.for_run)."""
        return check_run(self.ctx.registry, RawRun.of(sent), self.offered, self.against_ours)
