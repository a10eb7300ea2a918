"""One tab's Run, written once: validate, take the session's run, load the model, stream the decode's
snapshots into the tab's outputs, end with "Stopped." after a Stop.

Every tab (Race, Drift, Sweep) runs this way. The session's run board hands out a stop flag (a new Run
or Stop in any tab cancels the run in flight); a refused input, core's own checks and an out-of-memory
are told in the tab's status line alone (its other panels stay as they were: no error badge over each
of them), and an API client gets the same message in that output; the board forgets the run however
it ends. A tab says how a run looks with a
TabView, whose every answer names the output components it updates (Outputs), and what it decodes
with a Job: plain data in, plain data out (no figures), which runs on the CPU or, for a GPU model,
inside a function decorated with spaces.GPU once, at build time, as ZeroGPU wants.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import gradio as gr
import torch
from gradio.blocks import Block

from app.serving.admission import visitor_of
from app.serving.closing import closed_after
from app.serving.context import AppContext
from app.serving.device_thread import CPU_THREAD
from app.serving.gpu import GPU_DURATION_S, free_memory, on_gpu
from app.serving.registry import ModelChoice
from app.serving.sessions import StopFlag
from app.serving.turn_queue import in_turns, waiting_text
from app.widgets.banner import banner, refused
from core.passes import release_graphs

# A handler's answer: the new values of some of its output components, by component; Gradio leaves the
# others as they are. So a panel is added where it is built and where its value is made, nowhere else.
Outputs = dict[Block, Any]

OOM = "Out of GPU memory: try a shorter gen length or prompt."
WAIT_POLL_S = 0.5  # how often a waiting run checks its stop flag and its place in line


class Job(Protocol):
    """What a run decodes. On ZeroGPU spaces.GPU pickles it into a forked worker, so it is plain data
    (settings, built policies, prompt ids), and the snapshots it yields are plain data too."""

    def snapshots(self, model: Any, tokenizer: Any, should_stop: Callable[[], bool]) -> Iterator: ...


class TabView(ABC):
    """One run of one tab, as that tab shows it: its outputs before the first snapshot, for each snapshot
    and after the last. The runner's own words (a place in line, loading, Stopped.) go to `status`."""

    def __init__(self, choice: ModelChoice, status: Block) -> None:
        self.choice = choice  # the model the run decodes with, looked up once when the run was checked
        self.status = status  # the tab's banner

    def message(self, text: str) -> Outputs:
        """Only the banner changes."""
        return {self.status: banner(text)}

    def loading(self, text: str) -> Outputs:
        """While the model loads (the first run of a model)."""
        return self.message(text)

    @abstractmethod
    def start(self, model: Any, tokenizer: Any) -> tuple[Outputs, Job]:
        """The outputs before the first snapshot, and what to decode."""

    @abstractmethod
    def show(self, snapshot: Any) -> Outputs:
        """The outputs for one snapshot (rendered here, between steps, off the clocks)."""

    def end(self) -> Outputs | None:
        """Outputs once the snapshots ran out by themselves (not after a Stop or a new Run), if any."""
        return None


class TabRunner:
    """A tab's runs, refused ones told in `status` (the tab's banner). A run holds its device's turn
    queue (app/serving/turn_queue.py) while it loads and decodes: for the whole run, or with
    `turn_per_snapshot` one turn per snapshot (a sweep, so a race waits for one of its decodes, not all
    of them)."""

    def __init__(self, ctx: AppContext, status: Block, gpu_duration_s: int = GPU_DURATION_S, oom_message: str = OOM,
                 turn_per_snapshot: bool = False, tab: str = "") -> None:
        self.ctx = ctx
        self.status = status
        self.tab = tab  # what a visitor's places are counted per (app/serving/admission.py)
        self.oom_message = oom_message
        self.turn_per_snapshot = turn_per_snapshot
        self.gpu_snapshots = on_gpu(self.snapshots, gpu_duration_s)  # decorated once, at build time

    def snapshots(self, choice: ModelChoice, stop: StopFlag | None, job: Job) -> Iterator:
        """The decoding half of a run (on a GPU it holds the GPU): plain data out, no figures.

        `stop` is the run's own flag, polled between steps. On ZeroGPU spaces.GPU pickles the arguments
        into a forked worker process; the flag is file-backed (app/serving/sessions.py), so the worker's
        copy sees a Stop or a new Run set in the server and its decode ends within one step."""
        model, tokenizer = self.ctx.load_warm(choice)
        should_stop = stop.is_set if stop is not None else (lambda: False)
        try:
            yield from job.snapshots(model, tokenizer, should_stop)
        except torch.OutOfMemoryError:
            release_graphs(model)  # the workspaces kept for later decodes go first, so the next run fits
            raise
        finally:
            free_memory()

    def refused(self, message: str) -> Outputs:
        """Only the status line changes, to say why."""
        return {self.status: refused(message)}

    def run(self, request: gr.Request | None, validate: Callable[[], TabView]) -> Iterator[Outputs]:
        """validate() (its ValueError is the visitor's message), a place among the visitor's runs in this
        tab, then the session's run of the view it gives."""
        session = getattr(request, "session_hash", None)
        visitor = visitor_of(request, self.ctx.proxied)
        try:
            view = validate()
            place = self.ctx.admission.enter(self.tab, visitor, session)
        except ValueError as e:
            yield self.refused(str(e))
            return
        # The flag is taken here, once: looked up by session key later, it could be the next run's.
        key, flag = self.ctx.board.begin(session)
        try:
            yield from self._stream(view, flag, visitor, session)
            if flag.reason == "stop":  # said last, so no update rendered while stopping can overwrite it
                yield view.message("Stopped.")
        except ValueError as e:  # core's own checks (e.g. the prompt does not fit the model)
            yield self.refused(str(e))
        except torch.OutOfMemoryError:
            yield self.refused(self.oom_message)
        finally:
            self.ctx.board.end(key, flag)
            self.ctx.admission.leave(place)

    def _gone(self, flag: StopFlag, session: str | None) -> bool:
        """Whether the run should end now: stopped, replaced, or nobody reads its updates (then it is stopped)."""
        if not flag.is_set() and self.ctx.forgotten(session):
            flag.stop("gone")
        return flag.is_set()

    def _stream(self, view: TabView, flag: StopFlag, visitor: str, session: str | None) -> Iterator[Outputs]:
        registry, choice = self.ctx.registry, view.choice
        queue = self.ctx.turn_queue(choice.device)
        ticket = queue.join(record=not self.turn_per_snapshot, visitor=visitor)
        try:
            shown = None
            while not queue.wait(ticket, WAIT_POLL_S):
                if self._gone(flag, session):
                    return
                # Told again only when the place changes: every update is CPU time taken from the
                # decode running now, and would show up in its step times. No run ahead is the turn
                # itself, granted after this wait timed out: the next wait takes it, nothing to tell.
                if (ahead := queue.ahead(ticket)) != shown and ahead:
                    shown = ahead
                    yield view.message(waiting_text(ahead, queue.estimate_s(ticket)))
            if self._gone(flag, session):
                return
            if not registry.is_loaded(choice.label):
                yield view.loading(f"Loading {choice.label} (the first run of a model takes a while)...")
            model, tokenizer = registry.load(choice)
            first, job = view.start(model, tokenizer)
            yield first
            if choice.device == "cuda":
                run = self.gpu_snapshots(choice, flag, job)
            else:  # every step on the thread CPU decodes run on (app/serving/device_thread.py)
                run = CPU_THREAD.iterate(self.snapshots(choice, flag, job))
            with closed_after(run) as snapshots:  # freed if cancelled
                if self.turn_per_snapshot:
                    queue.leave(ticket)
                    snapshots = in_turns(queue, snapshots, flag.is_set, visitor=visitor)
                for snapshot in snapshots:
                    if self._gone(flag, session):
                        return
                    yield view.show(snapshot)  # rendering happens here, between steps, off the clocks
            # The last render, and gradio's encoding of it while this generator waits at the yield, still
            # hold the turn: after it they would run beside the next visitor's decode and slow its steps.
            last = None if flag.is_set() else view.end()
            if last is not None:
                yield last
        finally:
            queue.leave(ticket)
