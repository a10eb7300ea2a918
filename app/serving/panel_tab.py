"""A tab whose Run sends its input panel (the Race, the Drift tab), run by the tab runner: what was sent
is checked once into a run (PanelTab.checked, the tab's own check), streamed as a PanelView, whose
renderer turns the snapshots into the tab's panels, and decoded as a RunJob.

What a visitor may ask for and how it is checked is the controls' (app/controls/run.py check_run);
running it is here, beside the runner (app/serving/runner.py), which knows nothing of the controls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import gradio as gr

from app.serving.context import AppContext
from app.serving.registry import ModelChoice
from app.serving.runner import Outputs, TabRunner, TabView


class PanelRun(Protocol):
    """A checked run as running it needs it: the model it decodes with, looked up once (app/controls/run.py Run)."""

    @property
    def choice(self) -> ModelChoice: ...


@dataclass(frozen=True)
class RunJob:
    """A Race or Drift run as its device decodes it (the tab runner's Job): `decode` is the tab's
    snapshots function (app/race/decode.py race_snapshots, app/drift/decode.py drift_snapshots), a
    module-level function, so the job stays plain data that pickles into ZeroGPU's worker."""

    decode: Callable[..., Iterator]  # (model, prompt_ids, run, throttle_s, should_stop) -> snapshots
    run: PanelRun
    prompt_ids: list[int]
    throttle_s: float

    def snapshots(self, model, tokenizer, should_stop: Callable[[], bool]) -> Iterator:
        return self.decode(model, self.prompt_ids, self.run, self.throttle_s, should_stop)


class PanelView(TabView):
    """One run of a PanelTab in its panels: `renderer(model, tokenizer, run)` turns the snapshots of
    `decode` into updates (with `empty(message)` before the first, and the prompt ids it decodes),
    which `panels.show` draws; `panels.cleared()` are no results, so a new run's go at once."""

    def __init__(self, run: PanelRun, panels: Any, throttle_s: float, renderer: Callable, decode: Callable) -> None:
        super().__init__(run.choice, panels.status)
        self.run, self.panels, self.throttle_s = run, panels, throttle_s
        self.make_renderer, self.decode = renderer, decode
        self.renderer: Any = None

    def loading(self, text: str) -> Outputs:
        return self.message(text) | self.panels.cleared()

    def start(self, model: Any, tokenizer: Any) -> tuple[Outputs, RunJob]:
        self.renderer = self.make_renderer(model, tokenizer, self.run)
        first = self.panels.show(self.renderer.empty("Starting...")) | self.panels.cleared()
        return first, RunJob(self.decode, self.run, self.renderer.prompt_ids, self.throttle_s)

    def show(self, snapshot: Any) -> Outputs:
        return self.panels.show(self.renderer.update(snapshot))


class PanelTab(ABC):
    """A tab whose Run sends its input panel: the handler checks what was sent once (`checked`) and
    streams the run as a PanelView. A subclass says how what was sent is checked, how a run decodes
    (`decode`, its snapshots) and how it is drawn (`renderer`, into the tab's panels)."""

    name: ClassVar[str]  # the tab's, as a visitor's runs under way are counted per tab
    renderer: ClassVar[Callable]  # (model, tokenizer, run) -> the run's renderer
    decode: ClassVar[Callable]  # (model, prompt_ids, run, throttle_s, should_stop) -> snapshots

    def __init__(self, ctx: AppContext, inputs: Any, panels: Any) -> None:
        self.ctx, self.inputs, self.panels = ctx, inputs, panels
        self.status = panels.status  # the tab's status line: where its handlers refuse what they were sent (refuses)
        self.runner = TabRunner(ctx, panels.status, tab=self.name)

    @abstractmethod
    def checked(self, sent: dict) -> PanelRun:
        """What was sent, by name, checked once and built into a run (a ValueError: the visitor's message)."""

    def view(self, run: PanelRun) -> PanelView:
        return PanelView(run, self.panels, self.ctx.throttle_s, self.renderer, self.decode)

    def run(self, request: gr.Request | None = None, **sent: object) -> Iterator[Outputs]:
        """Check, then stream the run: the tab's panels after each throttled snapshot.

        `sent`: the panel's inputs by name, as the HTTP API names them too."""
        yield from self.runner.run(request, lambda: self.view(self.checked(sent)))
