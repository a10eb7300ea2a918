"""The Race tab's teaching mode: replay the last race (or a downloaded trace) slowed down, pause, step
and scrub it, with a story per lane of what the step on screen did.

The replay draws into the race's own panels (app/race/panels.py: banner, speed, text, entropy trace,
rows, and the story beside each lane's text), whose plots then mark the step on screen; nothing is
decoded again (app/race/replay.py). Every handler checks what it
is sent: the frame and the pace are bounded here too, and a trace file is read strictly
(app/race/trace_reader.py); what is refused is said in the race's status line, the panels left as
they were. The file comes from Gradio (an upload, or the trace the race wrote), never
from a path a visitor typed.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
from gradio.blocks import Block

from app.controls.panel import as_sent, raw_slider
from app.race.comparison import Comparison, speedup
from app.race.decode import Snapshot
from app.race.panels import DRAWN_NAMES, SIDES, RacePanels
from app.race.playback import Playbacks
from app.race.render import Renderer
from app.race.replay import DEFAULT_PACE, PACES, Replay
from app.race.replay_store import DROPPED, ReplayStore, StoredReplay
from app.race.speed import finish_words
from app.race.trace_reader import MAX_TRACE_BYTES, read_trace
from app.serving.runner import Outputs
from app.widgets.banner import banner, refuses
from app.widgets.explain import explain_step
from app.widgets.throttle import DEFAULT_THROTTLE_S
from core.refusal import shown as shown_value

HELP = """### Replay (teaching mode)
Replay the race above from its recorded steps, slowed down: every lane stays on the shared clock of
measured compute time, so the faster policy still pulls ahead by the measured ratio. Nothing is decoded
again. Or load a trace downloaded from this app (also one recorded on a GPU).
**Keys** (outside a text box): **space** plays or pauses, **left / right arrow** step back / forward."""
NO_REPLAY = "Nothing to replay yet: run a race first (then press Replay this race), or load a trace file."
# What a replay's endpoints return, by name, in order (ReplayPanel.outputs): what a race draws, each lane's
# story, the frame slider and the frame number.
REPLAY_OUTPUT_NAMES = (*DRAWN_NAMES, *(f"{side}.story" for side in SIDES), "slider", "frame")
REPLAY_CONCURRENCY = 16  # playing replays sleep between frames: they hold a worker, not the CPU
TRACE_READS = 1  # traces read at once: reading one takes several times its size while it lasts

# Space plays/pauses, arrows step, whenever the replay panel is on screen and no text field has the focus
# (a pace just picked, or the slider, may have it).
REPLAY_JS = """
() => {
  document.addEventListener('keydown', (ev) => {
    const panel = document.querySelector('#replay-panel');
    const target = ev.target;
    if (!panel || panel.offsetParent === null || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const choice = target && target.tagName === 'INPUT' && ['radio', 'checkbox', 'range'].includes(target.type);
    if (target && !choice && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    const ids = {'ArrowRight': '#replay-next', 'ArrowLeft': '#replay-prev'};
    let id = ids[ev.key];
    if (ev.key === ' ') {
      const banner = document.querySelector('#banner');
      id = banner && banner.innerText.includes('Replay playing') ? '#replay-pause' : '#replay-play';
    }
    const button = id && document.querySelector(id);
    if (!button) return;
    ev.preventDefault();
    button.click();
  });
}
"""


def load_trace_file(path: str | None) -> Replay:
    """A Replay from a trace file Gradio holds (an upload or the race's own trace); ValueError otherwise."""
    if not path:
        raise ValueError(NO_REPLAY)
    try:
        size = Path(path).stat().st_size if isinstance(path, str) and Path(path).is_file() else None
    except OSError:  # a name the system refuses (too long, say)
        size = None
    if size is None:
        raise ValueError(f"There is no trace file at {shown_value(path)}: load a trace downloaded from this app.")
    if size > MAX_TRACE_BYTES:  # refused before reading it
        raise ValueError(f"The trace is {size / 2**20:.1f} MB; a trace may be at most {MAX_TRACE_BYTES >> 20} MB.")
    return Replay.of(read_trace(Path(path).read_bytes()))


def check_frame(replay: Replay | None, frame: object) -> tuple[Replay, int]:
    if replay is None:
        raise ValueError(NO_REPLAY)
    if isinstance(frame, float) and frame.is_integer():
        frame = int(frame)
    if not isinstance(frame, int) or isinstance(frame, bool) or not 0 <= frame <= len(replay):
        raise ValueError(f"Replay frame must be a whole number from 0 to {len(replay)}; got {shown_value(frame)}.")
    return replay, frame


def check_pace(pace: object) -> str:
    if not isinstance(pace, str) or pace not in PACES:
        raise ValueError(f"Pace must be one of: {', '.join(PACES)}; got {shown_value(pace)}.")
    return pace


def replay_banner(snap: Snapshot, comparison: Comparison, message: str) -> str:
    """Where the replay is, the speedup measured up to the frame on screen, and which comparison it is."""
    base, ours = snap.lanes[0], snap.lanes[-1]
    done = all(lane.done for lane in snap.lanes)
    s = speedup(base, ours, done)
    if s is None:
        ratio = ""
    elif done:
        ratio = f" {finish_words(snap.lanes, comparison)}: <b>{s:.2f}x</b> speedup (measured)."
    else:
        ratio = f" Speedup so far: <b>{s:.2f}x</b> (decode rate, measured compute time)."
    words = f" <span class='ec-note'>{html.escape(comparison.words(), quote=False)}.</span>"
    return banner(f"{html.escape(message)}{ratio}{words}")


def story(replay: Replay, lane: int, shown: int, renderer: Renderer) -> str:
    """What lane `lane`'s step on screen did and why, and what its next step did (app/widgets/explain.py)."""
    events = replay.trace.lanes[lane].events
    if not shown:
        return "*No step yet.*"
    after = events[shown] if shown < len(events) else None
    return explain_step(events[shown - 1], after, renderer.layout.text)


@dataclass(frozen=True)
class ReplayPanel:
    """The replay's handlers, drawing into the race's panels and the replay's own frame controls. A
    session's gr.State holds the key of its replay in `store`; `playbacks` are the replays playing now."""

    race: RacePanels
    replay: gr.State  # the session's StoredReplay
    slider: gr.Slider  # the frame on screen, to drag
    frame: gr.Number  # the frame on screen, as the handlers read it
    store: ReplayStore = field(default_factory=ReplayStore)
    playbacks: Playbacks = field(default_factory=Playbacks)
    clock: Callable[[], float] = time.monotonic  # the playbacks' wall clock
    # True for a session whose client has left its updates unread (AppContext.forgotten): its playback stops
    forgotten: Callable[[str | None], bool] = lambda session: False

    def outputs(self) -> list[Block]:
        """What a frame updates: REPLAY_OUTPUT_NAMES in the HTTP API's order (the race's banner, time panel
        and lanes, each lane's story, the frame slider and the frame number), and whether the middle lane
        shows."""
        own = {"slider": self.slider, "frame": self.frame}
        named = [own[name] if name in own else self.race.named(name) for name in REPLAY_OUTPUT_NAMES]
        return [*named, self.race.middle]

    def show_frame(self, replay: Replay, n: int, state: str, renderer: Renderer | None = None) -> Outputs:
        renderer = renderer or Renderer(replay.layout(), cursor=True)
        snap = replay.snapshot(n)
        clock = max(lane.clock for lane in snap.lanes)
        message = f"Replay {state}: frame {n} of {len(replay)}, compute clock {clock:.3f} s."
        update = renderer.update(snap)
        out = self.race.show(update) | {self.race.status: replay_banner(snap, renderer.layout.comparison, message)}
        for lane, (side, shown) in enumerate(zip(update.sides, replay.counts(n))):
            out[self.race.lanes[side].story] = story(replay, lane, shown, renderer)
        return out | {self.slider: gr.Slider(maximum=len(replay), value=n), self.frame: n}

    @property
    def status(self) -> gr.HTML:
        """The race's status line: where the replay's handlers refuse what they were sent (refuses)."""
        return self.race.status

    def stored(self, stored: object) -> Replay | None:
        """The session's replay; a ValueError if the store dropped it (None: it never had one)."""
        if self.store.dropped(stored):
            raise ValueError(DROPPED)
        return self.store.get(stored)

    def halt(self, stored: object) -> int | None:
        """Halt the session's replay if it is playing: the frame on screen, or None if none was playing."""
        return self.playbacks.halt(stored.key) if isinstance(stored, StoredReplay) else None

    @refuses
    def load(self, path: object, stored: object = None) -> Outputs:
        """A trace file as the session's replay, in place of the one it had."""
        self.halt(stored)
        replay = load_trace_file(path)
        kept = self.store.put(replay, replacing=stored)
        return {self.replay: kept} | self.show_frame(replay, 0, "loaded")

    @refuses
    def show(self, stored: object, frame: object) -> Outputs:
        """Frame `frame` (typed, or the slider's), the replay paused there."""
        self.halt(stored)
        replay, n = check_frame(self.stored(stored), frame)
        return self.show_frame(replay, n, "paused")

    def pause(self, stored: object, frame: object) -> Outputs:
        """Paused on the frame on screen: the playback's last, else the frame the page sent."""
        on_screen = self.halt(stored)
        return self.show(stored, frame if on_screen is None else on_screen)

    @refuses
    def step(self, stored: object, frame: object, delta: int) -> Outputs:
        on_screen = self.halt(stored)
        replay, n = check_frame(self.stored(stored), frame if on_screen is None else on_screen)
        return self.show_frame(replay, replay.clamp(n + delta), "paused")

    @refuses
    def play(self, stored: object, frame: object, pace: object, request: gr.Request | None = None
             ) -> Iterator[Outputs]:
        """Frames at `pace` from `frame` on, each update carrying only what changed since the last; they stop
        once the session's client leaves them unread, as a race's do."""
        on_screen = self.halt(stored)
        replay, n = check_frame(self.stored(stored), frame if on_screen is None else on_screen)
        pace = check_pace(pace)
        start = 0 if n == len(replay) else n  # at the end, Play starts over
        renderer = Renderer(replay.layout(), cursor=True)  # one per playback: unchanged lanes are not redrawn
        playback = self.playbacks.start(stored.key, start)
        sent: dict = {}
        try:
            yield changed(self.show_frame(replay, start, f"playing at {pace}", renderer), sent)
            session = getattr(request, "session_hash", None)
            for shown in replay.play(start, pace, DEFAULT_THROTTLE_S, self.clock, playback.sleep, playback.halted):
                if not playback.send(shown) or self.forgotten(session):
                    return
                state = "finished" if shown == len(replay) else f"playing at {pace}"
                yield changed(self.show_frame(replay, shown, state, renderer), sent)
        finally:
            self.playbacks.end(playback)


def changed(out: Outputs, sent: dict) -> Outputs:
    """The outputs of `out` the page does not have yet (not the same object, nor equal text, as sent
    last), so a frame carries only what moved (Gradio leaves an output a handler does not name as it
    is); `sent` is updated with them."""
    new = {block: value for block, value in out.items()
           if not (sent.get(block, _NOTHING) is value or (isinstance(value, str) and sent.get(block) == value))}
    sent.update(new)
    return new


_NOTHING = object()


def build_replay_panel(race: RacePanels, run_button: gr.Button, store: ReplayStore | None = None,
                       forgotten: Callable[[str | None], bool] = lambda session: False) -> ReplayPanel:
    """The replay's controls and events, under the race (call inside the Race tab). A replay draws into
    the race's panels and each lane's story beside its text, which a Run clears; `race.trace` is the
    race's trace download, what "Replay this race" loads; `forgotten` is ReplayPanel's."""
    # per session, the key of its replay in the store (which bounds their memory), gone an hour after last use
    replay = gr.State(None, time_to_live=3600)
    with gr.Column(elem_id="replay-panel"):
        gr.Markdown(HELP)
        with gr.Row():
            replay_race = gr.Button("Replay this race", elem_id="replay-race")
            upload = gr.File(label="Load a trace (JSON)", file_types=[".json"], type="filepath", height=90,
                             elem_id="replay-upload")
            pace = as_sent(gr.Radio(list(PACES), value=DEFAULT_PACE, elem_id="replay-pace",
                                    label="Pace (slow-down of measured compute time)"))
        with gr.Row():
            prev = gr.Button("< Step back", elem_id="replay-prev")
            play = gr.Button("Play", variant="primary", elem_id="replay-play")
            pause = gr.Button("Pause", elem_id="replay-pause")
            nxt = gr.Button("Step forward >", elem_id="replay-next")
        with gr.Row():
            slider = raw_slider(0, 1, value=0, step=1, scale=4, elem_id="replay-slider",
                                label="Frame (every lane's steps, in the order their compute ended)")
            # The frame handlers read, as sent: check_frame's message names it and its range (the slider's
            # own bounds change per replay, and Gradio would check either with its own words).
            frame = as_sent(gr.Number(0, label="Frame", minimum=None, maximum=None, precision=None, scale=1,
                                      elem_id="replay-frame"))
    panel = ReplayPanel(race, replay, slider, frame, ReplayStore() if store is None else store, forgotten=forgotten)
    outputs = panel.outputs()
    played = play.click(panel.play, [replay, frame, pace], outputs, concurrency_id="replay",
                        concurrency_limit=REPLAY_CONCURRENCY, api_name="replay_play")
    stops = [played]  # the handlers that move the replay halt its playback themselves (app/race/playback.py)
    loading = dict(cancels=stops, concurrency_id="replay_load", concurrency_limit=TRACE_READS)
    replay_race.click(panel.load, [race.trace, replay], [*outputs, replay], api_name="replay_race", **loading)
    upload.upload(panel.load, [upload, replay], [*outputs, replay], api_name="replay_load", **loading)
    pause.click(panel.pause, [replay, frame], outputs, api_name="replay_pause")
    frame.submit(panel.show, [replay, frame], outputs, api_name="replay_show")
    slider.release(panel.show, [replay, slider], outputs, api_visibility="private")
    prev.click(lambda r, f: panel.step(r, f, -1), [replay, frame], outputs, api_visibility="private")
    nxt.click(lambda r, f: panel.step(r, f, 1), [replay, frame], outputs, api_visibility="private")
    stories = [race.lanes[side].story for side in SIDES]
    run_button.click(lambda: dict.fromkeys(stories, ""), None, stories, queue=False, cancels=stops,
                     api_visibility="private")
    return panel
