"""The Gradio app's shell: three tabs (Race, app/race/tab.py; Drift diagnostics, app/drift/tab.py; the
tau x k Sweep, app/sweep/tab.py) over one AppContext, and the launch.

Handlers tell every expected failure (bad input, a prompt the model cannot read or that is too long
for it, out of GPU memory) in the tab's status line, in plain words, and leave its other panels as
they were (app/widgets/banner.py `refused`); anything unexpected reaches the visitor as Gradio's
generic error, never as a stack trace (show_error stays off).
"""

from __future__ import annotations

import gradio as gr

from app.controls.panel import CSS as PROMPT_CSS
from app.controls.panel import KEEP_TYPED_JS
from app.drift.tab import DriftTab, build_drift_tab
from app.race.panels import CSS as LANE_CSS
from app.race.parted import CSS as PARTED_CSS
from app.race.replay_panel import REPLAY_JS
from app.race.speed import CSS as SPEED_CSS
from app.race.tab import RaceTab, build_race_tab
from app.race.time_panel import CSS as TIME_CSS
from app.race.trace_reader import MAX_TRACE_BYTES
from app.serving.admission import MAX_QUEUED
from app.serving.context import AppContext
from app.serving.gpu import CONCURRENCY
from app.serving.listener import unread_check
from app.serving.registry import ModelRegistry
from app.sweep.panels import SWEEP_JS
from app.sweep.point import CSS as POINT_CSS
from app.sweep.tab import build_sweep_tab
from app.widgets.banner import CSS as BANNER_CSS
from app.widgets.text_diff import CSS as DIFF_CSS
from app.widgets.text_view import CSS as TEXT_CSS
from app.widgets.throttle import DEFAULT_THROTTLE_S

CSS = BANNER_CSS + PROMPT_CSS + TEXT_CSS + LANE_CSS + SPEED_CSS + TIME_CSS + PARTED_CSS + DIFF_CSS + POINT_CSS
PAGE_SCRIPTS = (SWEEP_JS, REPLAY_JS, KEEP_TYPED_JS)
JS = "() => { " + " ".join(f"({script.strip()})();" for script in PAGE_SCRIPTS) + " }"  # Gradio takes one script

PICKED_INTO = (RaceTab.name, DriftTab.name)  # the tabs whose tau and k a point picked in the Sweep sets


def build_demo(
    registry: ModelRegistry, *, throttle_s: float = DEFAULT_THROTTLE_S, concurrency: int = CONCURRENCY,
    proxied: bool | None = None,
) -> gr.Blocks:
    """The app, admitting `concurrency` runs at once (they decode in turn: app/serving/turn_queue.py),
    holding at most MAX_QUEUED requests in Gradio's queue; `proxied`: whether a visitor is read from
    X-Forwarded-For (None: as app/serving/admission.py decides)."""
    ctx = AppContext(registry, throttle_s=throttle_s, proxied=proxied)
    with gr.Blocks(title="EntropyCache decode race") as demo:
        with gr.Tabs():
            with gr.Tab("Race", id="race"):
                race = build_race_tab(ctx)
            with gr.Tab("Drift", id="drift"):
                drift = build_drift_tab(ctx)
            with gr.Tab("Sweep", id="sweep"):  # a picked point loads into both tabs' tau and k
                tabs = {tab.name: tab for tab in (race, drift)}
                build_sweep_tab(ctx, {name: tabs[name].inputs for name in PICKED_INTO})
    demo.queue(default_concurrency_limit=concurrency, max_size=MAX_QUEUED)
    ctx.forgotten = unread_check(demo)
    return demo


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, share: bool = False) -> str:
    """Start serving in the background; returns the local URL. (CSS and the page's script go here:
    Gradio 6 takes them at launch.)"""
    # Uploads (a trace to replay) larger than a trace may be are refused before Gradio stores them.
    demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True, css=CSS, js=JS,
                max_file_size=MAX_TRACE_BYTES, show_error=False, quiet=True)
    return demo.local_url
