"""The Sweep tab: a tau x k sweep of EntropyCache on held-out stories or word problems, or on prompts of
your own (one a line), run in the background with a progress bar, drawn as a Pareto plot of speedup
against accuracy, agreement or first divergence. Picking a point (a click on the plot or a table row)
shows its texts beside the exact decoder's, prompt by prompt (app/sweep/point.py), and loads its tau and
k into the Race and Drift tabs; "lower tau" / "higher tau" move to the next point at the same k, so the
same prompts are seen at both. At the end the points and every text download as CSV and JSON, with
the command line that runs the same sweep (app/sweep/export.py).

The tab's panels, and how a result fills them, are app/sweep/panels.py; here are its inputs and the
handlers. A refused input is told in the status line, the other panels left as they were.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace

import gradio as gr
from gradio.blocks import Block

from app.controls.declared import DECODE_CONTROLS, RUN_CONTROLS
from app.controls.panel import LENGTHS, Inputs, as_sent, bounded_slider, wire_run
from app.serving.budget import Decode, check_sweep
from app.serving.context import AppContext
from app.serving.registry import EMBEDDED_LABEL, HUB_MODELS, ModelChoice, prompt_tokens
from app.serving.runner import Outputs, TabRunner, TabView
from app.serving.sent import check_choice
from app.sweep.decode import (
    DECODING,
    DEFAULT_KS,
    DEFAULT_TAUS,
    MAX_KS,
    MAX_OWN_PROMPTS,
    MAX_PROBLEMS,
    MAX_TAUS,
    OWN_PROMPTS,
    PROBLEMS,
    SOURCES,
    SweepJob,
    SweepParams,
    parse_point,
    parse_sweep,
)
from app.sweep.export import cli_command, sweep_record, write_downloads
from app.sweep.panels import LOADED, PICK_OUTPUTS, SweepPanels, SweepResult, build_sweep_panels, pick_names
from app.sweep.point import PICK_HINT, neighbour, point_html
from app.sweep.render import METRICS, pareto_figure, pareto_placeholder, progress_html, shown_metric
from app.widgets.banner import refuses
from app.widgets.text_view import TokenText
from core.loading import chat_prompt_ids
from core.refusal import shown as shown_value
from evaluation.bench import Progress

SWEEP_GPU_DURATION_S = 600  # a sweep is many decodes: ZeroGPU ends it at this bound (what finished is shown)
SWEEP_OOM = "Out of GPU memory: try a shorter gen length."
INTRO = f"""### Tune tau by looking
The exact decoder and EntropyCache at every (tau, k) you list decode the same prompts, interleaved,
exactly as `python -m evaluation bench` does: held-out prompts of one task, or **your own prompts**, one per
line (up to {MAX_OWN_PROMPTS}), on any model in the picker. Each point is one setting's measured speedup
against its accuracy (word problems: the right number; stories: the story checker's pass), its token
agreement with the exact decoder, or its first divergence: how many tokens its texts match the exact
decoder's before they part (the median over the prompts). Points on the dotted Pareto front are the
settings worth choosing between. Held-out prompts decode as the model declares for their task (the
embedded model samples its stories at temperature 0.7); your own prompts decode greedily (temperature
0), whatever they ask, so a story of yours may loop where the Race, at its temperature, does not.
**Pick a point** (click it, or a table row) to read its texts beside
the exact decoder's, every differing token marked, and to load its tau and k into the Race and Drift
tabs. Up to {MAX_TAUS} tau values, {MAX_KS} k values and {MAX_PROBLEMS} held-out prompts."""
DONE = ("Sweep done: {n} prompt{s}{greedy}. Pick a point (or a table row) to see its texts and load its tau and k into "
        'the Race and Drift tabs. <span class="ec-note">The same sweep from the command line: '
        "<code>{command}</code></span>")
NO_SWEEP = "Run a sweep first: then pick a point to see its texts."
# The prompts box, once it holds text, picks "your prompts" (inputs: the box, the choice; its output: the choice).
PICK_OWN_PROMPTS = f"(text, picked) => [typeof text === 'string' && text.trim() ? {json.dumps(OWN_PROMPTS)} : picked]"
# What this tab offers a visitor whose prompt line the model cannot read: its held-out sets, not examples.
HELD_OUT_INSTEAD = "pick one of the held-out sets under prompts, or write lines like them."


def model_flag(choice: ModelChoice) -> str | None:
    """The model as the bench's --model takes it: None for the embedded one (its default), a hub alias,
    or a placeholder for an operator's folder (a server path is not shown)."""
    if choice.label == EMBEDDED_LABEL:
        return None
    return choice.source if choice.source in HUB_MODELS.values() else "MODEL_DIR"


class SweepView(TabView):
    """One sweep in the tab's panels. The plot and table are redrawn only when a prompt has finished
    (the points move only then); the end repeats the whole result, with the downloads."""

    def __init__(self, params: SweepParams, choice: ModelChoice, metric: str, panels: SweepPanels,
                 command: str, prompt_ids: Sequence[list[int] | None]) -> None:
        super().__init__(choice, panels.status)
        self.params, self.metric, self.panels, self.command = params, metric, panels, command
        # each prompt's ids as the registry's check tokenized it; None where the model's tokenizer was not
        # at hand then (a GPU model not loaded yet): tokenized once it is (start)
        self.prompt_ids = prompt_ids
        self.shown = 0  # prompts drawn so far
        self.ids: set[int] = set()  # the tokens their texts use, for the texts' pieces
        self.last: Progress | None = None
        self.drawn: Outputs | None = None
        self.text: TokenText | None = None

    def start(self, model, tokenizer) -> tuple[Outputs, SweepJob]:
        """Every prompt must fit the model with the gen length (named if not); then the panels are cleared."""
        limit, gen = model.config.max_seq_len, self.params.config.gen_len
        items = self.params.items()
        ids = [chat_prompt_ids(tokenizer, item.prompt) if known is None else known
               for item, known in zip(items, self.prompt_ids)]
        for i, prompt_ids in enumerate(ids):
            length = len(prompt_ids)
            if length + gen > limit:
                raise ValueError(f"{self.params.name(i)}: the prompt ({length} tokens) and the gen length ({gen}) "
                                 f"exceed the model's {limit} positions: shorten one of them.")
        self.text = TokenText(tokenizer, model.config.mask_token_id)
        p = self.panels
        cleared = {p.plot: pareto_placeholder(), p.table: None, p.point: PICK_HINT, p.downloads: None, p.result: None}
        return self.message("Warming up...") | cleared, SweepJob(self.params, tuple(map(tuple, ids)))

    def show(self, progress: Progress) -> Outputs:
        self.last = progress
        status = {self.panels.status: progress_html(progress, self.params.count)}
        if progress.problems == self.shown:
            return status
        # the tokens of the prompts finished since the last drawing: a row's records only grow at the end
        self.ids |= {t for row in progress.rows for record in row["per_prompt"][self.shown:] for t in record["tokens"]}
        self.shown = progress.problems
        result = SweepResult(self.params, progress.rows, self.text.pieces(self.ids), self.text.sep)
        self.drawn = self.panels.drawn(result, self.metric)
        return status | self.drawn

    def end(self) -> Outputs | None:
        """The whole result again, under the final banner, with the files to download: an API client's answer."""
        if self.drawn is None or self.last.decodes != self.last.total:
            return None
        n, rows = self.params.count, self.last.rows
        files = write_downloads(sweep_record(self.params, rows, self.command))
        greedy = ", decoded greedily (temperature 0)" if self.params.task == OWN_PROMPTS else ""
        done = DONE.format(n=n, s="s" * (n != 1), greedy=greedy, command=html.escape(self.command))
        return self.message(done) | self.drawn | {self.panels.downloads: files}


class SweepTab:
    """The Sweep tab's handlers; a picked point loads into the tau and k sliders of `targets` (the Race's
    and the Drift tab's input panels, by their tab's name)."""

    def __init__(self, ctx: AppContext, panels: SweepPanels, targets: dict[str, Inputs],
                 lengths: dict[str, gr.Slider] | None = None, problems: gr.Slider | None = None) -> None:
        self.ctx, self.panels, self.targets = ctx, panels, targets
        self.status = panels.status  # the tab's status line: where its handlers refuse what they were sent (refuses)
        self.lengths = lengths or {}  # the gen and block length sliders, which a model sets, by name (LENGTHS)
        self.problems = problems  # the held-out prompts' count, which only a held-out set takes
        self.runner = TabRunner(ctx, panels.status, SWEEP_GPU_DURATION_S, SWEEP_OOM, turn_per_snapshot=True,
                                tab="sweep")

    def run(self, request: gr.Request | None = None, **sent: object) -> Iterator[Outputs]:
        """Check, then stream the sweep: the banner after each decode, the plot and table after each prompt.

        `sent`: the tab's inputs by name (parse_sweep's, and the y axis `metric`), as the HTTP API names them."""

        def view() -> SweepView:
            registry = self.ctx.registry
            sweep = {key: value for key, value in sent.items() if key != "metric"}
            params = parse_sweep(sweep, models=registry.labels, graphs=registry.graphs)
            shown = _metric(sent.get("metric"))
            choice = registry.choice(params.model)
            items, prompt_ids = params.items(), []
            for i, item in enumerate(items):  # a prompt the model cannot read is told before decoding
                try:
                    prompt_ids.append(registry.check_prompt(choice, item.prompt, HELD_OUT_INSTEAD))
                except ValueError as e:
                    raise ValueError(f"{params.name(i)}: {e}") from None
            lengths = [prompt_tokens(ids, item.prompt) for ids, item in zip(prompt_ids, items)]
            check_sweep([Decode.of(n, params.config) for n in lengths], params.settings, choice.device)
            command = cli_command(params, model_flag(choice), choice.device)
            return SweepView(params, choice, shown, self.panels, command, prompt_ids)

        yield from self.runner.run(request, view)

    def picked_outputs(self) -> dict[str, Block]:
        """What a picked point updates that an API client gets, by name in its order (pick_names): each
        target's tau and k, the message, the plot, the point's texts, the status line (a refusal)."""
        sliders = [ins.controls[key] for ins in self.targets.values() for key in LOADED]
        return dict(zip(pick_names(list(self.targets)), [*sliders, *(getattr(self.panels, n) for n in PICK_OUTPUTS)]))

    @refuses
    def on_task(self, task: object) -> Outputs:
        """The held-out prompts' count, shown only while a held-out set is picked: your prompts are the box's."""
        return {self.problems: gr.Slider(visible=check_choice(task, SOURCES, "task") != OWN_PROMPTS)}

    @refuses
    def on_model(self, label: object) -> Outputs:
        """A model's own gen and block length."""
        c = self.ctx.registry.choice(label)
        return {slider: getattr(c, key) for key, slider in self.lengths.items()}

    @refuses
    def redraw(self, metric: str, result: SweepResult | None) -> Outputs:
        """The plot again with another y axis (no decoding)."""
        shown = _metric(metric)
        if result is None:
            return {self.panels.plot: pareto_placeholder()}
        return {self.panels.plot: pareto_figure(result.rows, shown, result.selected),
                self.panels.metric: shown_metric(result.rows, shown)}

    @refuses
    def pick_point(self, value: str, metric: str, result: SweepResult | None) -> Outputs:
        """A clicked point: '[tau, k, nonce]' from SWEEP_JS, checked like any other input."""
        tau, k = parse_point(value)
        return self._load(tau, k, _metric(metric), result)

    @refuses
    def pick_row(self, metric: str, result: SweepResult | None, evt: gr.SelectData) -> Outputs:
        """A clicked table row, looked up in the session's own results."""
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        # A bad row comes only from a client, which may send True (an int to isinstance): no row 1.
        if result is None or type(row) is not int or not 0 <= row < len(result.rows):
            raise ValueError(f"There is no row {shown_value(row)} in this session's sweep: pick one of its rows.")
        shown = _metric(metric)
        params = result.rows[row]["params"]
        if "tau" not in params:
            return {self.panels.loaded: "That row is the exact decoder: pick an EntropyCache row."}
        return self._load(params["tau"], params["k"], shown, result)

    @refuses
    def move(self, step: int, metric: str, result: SweepResult | None) -> Outputs:
        """The next point along tau at the picked point's k (`step` -1: lower, +1: higher)."""
        shown = _metric(metric)
        point = None if result is None else neighbour(result.rows, result.selected, step)
        if point is None:
            return {self.panels.point: NO_SWEEP}
        out = self._load(*point, shown, result)
        if point == result.selected:  # at the end of its k's taus: said, not a silent click
            way, end = ("lower", "lowest") if step < 0 else ("higher", "highest")
            out[self.panels.loaded] = (f"No {way} tau at k {point[1]}: tau {point[0]:g} is this sweep's {end}. "
                                       f"{out[self.panels.loaded]}")
        return out

    def _load(self, tau: float, k: int, metric: str, result: SweepResult | None) -> Outputs:
        """tau and k into every target, what was loaded said, the point marked on the plot, its texts shown."""
        out = {ins.controls[key]: value for ins in self.targets.values() for key, value in zip(LOADED, (tau, k))}
        message = f"Loaded **tau {tau:g}, k {k}** into the Race and Drift tabs."
        if result is None:
            return out | {self.panels.loaded: message}
        p, c = result.params, result.params.config
        schedule = (f"parallel decoding (threshold {c.threshold:g})" if c.threshold is not None
                    else f"{c.steps} steps" if c.steps else "one token per step")
        blocks = f"Dream's schedule in {c.max_steps} steps" if c.schedule == "dream" else (
            f"block length {c.block_len}, {schedule}")
        message += f" The sweep decoded {p.task} with gen length {c.gen_len}, {blocks}."
        panels = self.panels
        return out | {panels.loaded: message, panels.plot: pareto_figure(result.rows, metric, (tau, k)),
                      panels.point: point_html(result.rows, tau, k, result.pieces, result.sep),
                      panels.result: replace(result, selected=(tau, k))}


def _metric(metric: object) -> str:
    """The y axis a handler was sent, checked (every handler that draws takes one from the client)."""
    return check_choice(metric, list(METRICS), "y axis")


def build_sweep_tab(ctx: AppContext, load_into: dict[str, Inputs]) -> SweepTab:
    """The tab's layout and events (call inside a gr.Tab). load_into: the input panels whose tau and k a
    picked point sets (the Race's and the Drift tab's), by their tab's name."""
    registry = ctx.registry
    first = registry.choice(registry.labels[0])
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=3):
            taus = gr.Textbox(DEFAULT_TAUS, label="tau values (nats, comma separated)", elem_id="sweep-taus")
            ks = gr.Textbox(DEFAULT_KS, label="k values (comma separated)", elem_id="sweep-ks")
            scope = bounded_slider(RUN_CONTROLS["scope"], prefix="sweep-")  # a dropdown: block or response
            # No max_length: the box would cut a longer paste silently; the handler refuses it, saying why.
            prompts = gr.Textbox("", lines=4, elem_id="sweep-prompts",
                                 label=f"Your prompts, one per line (at most {MAX_OWN_PROMPTS})",
                                 placeholder="\n".join(first.examples[:3]))
        with gr.Column(scale=2):
            model = as_sent(gr.Dropdown(registry.labels, value=first.label, label="Model"))
            task = as_sent(gr.Radio(SOURCES, value=SOURCES[0], label="prompts", elem_id="sweep-task"))
            problems = bounded_slider(PROBLEMS, prefix="sweep-")
            with gr.Row():
                run = gr.Button("Run sweep", variant="primary", elem_id="sweep-run-btn")
                stop = gr.Button("Stop", variant="stop", elem_id="sweep-stop-btn")
    with gr.Accordion("Decoding", open=False, elem_id="sweep-decoding"):
        with gr.Row():
            defaults = {key: getattr(first, key) for key in LENGTHS}  # the model's own lengths
            decoding = {key: bounded_slider(DECODE_CONTROLS[key], defaults.get(key), "sweep-") for key in DECODING}
    panels, picker = build_sweep_panels()
    lengths = {key: decoding[key] for key in LENGTHS}
    tab = SweepTab(ctx, panels, load_into, lengths, problems)

    sent = {"model": model, "task": task, "prompts": prompts, "taus": taus, "ks": ks, "scope": scope,
            "problems": problems, **decoding, "metric": panels.metric}
    wire_run(run, stop, ctx, tab.run, sent, panels.outputs(), "sweep", panels.status)
    model.change(tab.on_model, model, [*lengths.values(), panels.status], api_visibility="private")
    # Prompts typed or pasted: sweep them. Picked in the page, not by a round trip to the server, so that a
    # Run pressed right after a paste already sends "your prompts".
    prompts.change(None, [prompts, task], task, js=PICK_OWN_PROMPTS, api_visibility="private")
    task.change(tab.on_task, task, [problems, panels.status], queue=False, api_visibility="private")
    panels.metric.change(tab.redraw, [panels.metric, panels.result], [panels.plot, panels.status, panels.metric],
                         queue=False, api_visibility="private")
    picked = [*tab.picked_outputs().values(), panels.result]
    shown = [panels.metric, panels.result]  # what every pick reads: the y axis and the session's sweep
    picker.pick.change(tab.pick_point, [picker.pick, *shown], picked, queue=False, api_name="sweep_pick")
    panels.table.select(tab.pick_row, shown, picked, queue=False, api_visibility="private")
    picker.lower.click(lambda m, r: tab.move(-1, m, r), shown, picked, queue=False, api_visibility="private")
    picker.higher.click(lambda m, r: tab.move(1, m, r), shown, picked, queue=False, api_visibility="private")
    return tab
