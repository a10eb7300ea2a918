"""A public Space against its visitors (issue 44): every input, valid JSON or not, reaches a named refusal;
a visitor's requests are bounded in number and work and cannot starve another's; a run nobody reads
stops; shared traces render as text. Driven as a hostile client would: raw HTTP and gradio_client
against the app on 127.0.0.1, and every handler the app registers called with what no page sends.
Bounded: a few requests each, short races, no sleeps that a result depends on."""

from __future__ import annotations

import html
import inspect
import json
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio_client import Client, handle_file
from test_server import args, check_result, refusal

from app.client import named
from app.controls.declared import PEER_CONTROLS
from app.race.panels import SIDES, build_race_panels
from app.race.replay_panel import build_replay_panel
from app.serving.admission import BUSY
from app.serving.downloads import DOWNLOAD_DIR
from app.serving.registry import EMBEDDED_LABEL
from core.refusal import shown

HOSTILE = "10.66.0.1"  # the address of the visitor who sends too much (X-Forwarded-For, as behind a Space's proxy)
SWEEP = dict(model=EMBEDDED_LABEL, task="word problems", prompts="", taus="0.5", ks="2", problems=1, gen_len=32,
             block_len=16, steps=0, threshold=0, top_p=0, top_k=0, alg="maskgit_plus", schedule="block",
             metric="accuracy", scope="block")


def in_api_order(url: str, api: str, data: list | dict) -> list:
    """`data` by name (a dict) as the endpoint's positional data, in the order the server's API info lists
    its parameters; a list as it is."""
    if isinstance(data, list):
        return data
    with urllib.request.urlopen(f"{url}gradio_api/info", timeout=30) as answer:
        parameters = json.load(answer)["named_endpoints"][f"/{api}"]["parameters"]
    return [data[p["parameter_name"]] for p in parameters]


def post(url: str, api: str, data: list | dict, address: str = "10.0.0.1") -> str:
    """POST /gradio_api/call/<api> as raw JSON (Python's json escapes a lone surrogate as \\udcff); the event id."""
    body = json.dumps({"data": in_api_order(url, api, data)}).encode()
    request = urllib.request.Request(f"{url}gradio_api/call/{api}", body, method="POST",
                                     headers={"Content-Type": "application/json", "X-Forwarded-For": address})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)["event_id"]


def read(url: str, api: str, event_id: str) -> list[tuple[str, object]]:
    """Every (event, data) of a call's stream, to its end."""
    with urllib.request.urlopen(f"{url}gradio_api/call/{api}/{event_id}", timeout=120) as answer:
        text = answer.read().decode()
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        out.append((lines.get("event"), json.loads(lines["data"]) if lines.get("data") not in (None, "null") else None))
    return out


def answer(url: str, api: str, data: list | dict) -> list:
    """The last outputs of a raw call that the HTTP API names (named(..., raw=True)) in their order; it
    must end as a completed call, never as Gradio's bare error."""
    stream = read(url, api, post(url, api, data))
    assert stream[-1][0] == "complete", stream[-3:]
    return list(named(stream[-1][1], f"/{api}", raw=True).values())


def run_data(**overrides) -> dict:
    """A race's or a drift run's inputs, every one (raw calls get no defaults), by name."""
    return {**args(**overrides), **{key: control.default for key, control in PEER_CONTROLS.items()}}


SURROGATE = "mia has 7 \udcff marbles ."
RAW_REFUSALS = [  # (api, data, the status line's words)
    ("run", run_data(prompt=SURROGATE), "The prompt has a lone surrogate (U+DCFF) at character 11"),
    ("drift", run_data(prompt=SURROGATE, policy="entropy"), "The prompt has a lone surrogate (U+DCFF) at character 11"),
    ("run", run_data(prompt=None), "Please enter a prompt: it is empty."),
    ("run", run_data(model=None), "Unknown model None; choose one of: "),
    ("run", run_data(policy=["none"]), "Unknown policy ['none']; choose one of: vanilla, d2cache, "),
    ("drift", run_data(policy="none"), "Unknown policy 'none'; choose one of: entropy, "),
    ("run", run_data(gen_len=2**70), "gen length must be an integer in [1, 512], got 1180591620717411303424"),
    ("run", run_data(tau=10**400), f"tau (EntropyCache) must be a number in [0, 12], got {'1' + '0' * 59}..."),
    ("sweep", {**SWEEP, "task": "your prompts", "prompts": SURROGATE},
     "Line 1 of your prompts: The prompt has a lone surrogate (U+DCFF) at character 11"),
    ("sweep", {**SWEEP, "task": "poems"}, "Unknown task 'poems'; choose one of: stories, "),
    ("sweep", {**SWEEP, "taus": "0.5,,2"}, "tau (EntropyCache): a value is missing between two commas"),
    ("sweep", {**SWEEP, "metric": None}, "Unknown y axis None; choose one of: "),
    ("sweep", {**SWEEP, "taus": "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8", "ks": "1,2,3,4", "problems": 50},
     "This sweep asks for 1650 decodes; a sweep on the CPU may ask for at most 200."),
    ("sweep_pick", ["[1, 2]", "bogus"], "Unknown y axis 'bogus'; choose one of: "),
    ("replay_play", [0, "3x"], "Nothing to replay yet"),
    ("replay_show", ["\udcff"], "Nothing to replay yet"),
]


@pytest.mark.parametrize(("api", "data", "words"), RAW_REFUSALS, ids=[f"{a} {w[:28]}" for a, _, w in RAW_REFUSALS])
def test_raw_json_reaches_a_named_refusal_in_the_status_line(served, api, data, words) -> None:
    assert words in refusal(answer(served.url, api, data), f"/{api}")


def test_a_sessions_later_calls_are_refused_in_our_words_too(served) -> None:
    """Gradio gives a session its own copy of a component that a handler updates, made from the component's
    class: the copy hands what a client sends on unchecked as well, so the handler names the problem."""
    client = Client(served.url, verbose=False)
    for _ in range(2):
        out = client.predict(**{**SWEEP, "metric": "bogus"}, api_name="/sweep")
        assert "Unknown y axis 'bogus'" in refusal(out, "/sweep")
    out = client.predict(**args(tau="abc"), api_name="/run")
    assert "tau (EntropyCache) must be a number in [0, 12], got 'abc'" in refusal(out)


def test_a_maximum_race_is_refused_naming_the_budget(served) -> None:
    out = Client(served.url, verbose=False).predict(**args("mia has 7 marbles . " * 100, gen_len=512, block_len=32),
                                                    api_name="/run")
    words = refusal(out)
    assert words.startswith("This run asks for ") and "a run on the CPU may ask for at most 600,000." in words


def test_a_trace_whose_number_python_would_not_read_is_refused_in_our_words(served, tmp_path) -> None:
    bad = tmp_path / "huge.json"
    bad.write_text('{"format": "entropycache-trace/2", "prompt_ids": [' + "9" * 5000 + "]}")
    out = Client(served.url, verbose=False).predict(handle_file(str(bad)), api_name="/replay_load")
    words = "The trace has a whole number of 5000 digits; a trace's numbers have at most 19."
    assert words in refusal(out, "/replay_load")


def test_every_handler_answers_whatever_it_is_sent(served) -> None:
    """Each function the app registers, called with values no page sends (a State is the server's own: None),
    returns or streams an answer: never an exception, which a client would see as Gradio's bare error."""
    garbage = [None, "\udcff", 10**5000, float("nan"), -1, [1, [2]], {"path": str(DOWNLOAD_DIR)}, "x" * 100_000]
    request = SimpleNamespace(session_hash="fuzz", client=SimpleNamespace(host="10.0.0.9"), headers={})
    called = 0
    for block_fn in served.demo.fns.values():
        if block_fn.fn is None:
            continue
        params = set(inspect.signature(block_fn.fn).parameters)
        for value in garbage:
            values = [None if isinstance(block, gr.State) else value for block in block_fn.inputs]
            keywords = block_fn.input_keyword_names or []  # the inputs sent by name come last
            kwargs = dict(zip(keywords, values[len(values) - len(keywords):]))
            values = values[:len(values) - len(keywords)]
            kwargs |= {"request": request} if "request" in params else {}
            if "evt" in params:
                kwargs["evt"] = SimpleNamespace(index=value)
            out = block_fn.fn(*values, **kwargs)
            if hasattr(out, "__next__"):
                out = list(out)
            called += 1
    assert called == len(garbage) * sum(f.fn is not None for f in served.demo.fns.values())


def test_the_replay_loader_names_a_missing_file_and_a_folder(tmp_path) -> None:
    with gr.Blocks():
        panel = build_replay_panel(build_race_panels(), gr.Button())
    for path in (str(tmp_path / "gone.json"), str(tmp_path)):
        out = panel.load(path)
        words = f"There is no trace file at {html.escape(shown(path), quote=False)}: load a trace downloaded from"
        assert list(out) == [panel.race.status] and words in out[panel.race.status]


MARKUP = "![](http://x.example/p.png) [a](http://x.example) <img src=x> www.x.example http://x.example/raw"


def crafted_trace(recorded: dict) -> dict:
    """`recorded` with markup in every string a trace carries."""
    trace = json.loads(json.dumps(recorded))
    trace["settings"].update(prompt=MARKUP, model=MARKUP, policy=MARKUP)
    trace["model"]["pieces"] = {key: MARKUP for key in trace["model"]["pieces"]}
    for lane in trace["lanes"]:
        lane.update(policy=MARKUP, text=MARKUP)
        for event in lane["events"]:
            event["reason"] = MARKUP
    return trace


def test_no_image_or_link_comes_from_a_shared_trace(served, tmp_path) -> None:
    client = Client(served.url, verbose=False, download_files=False)
    recorded = named(client.predict(**args(), api_name="/run"))["trace"]
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(crafted_trace(json.loads(Path(recorded["path"]).read_text()))))
    loaded = client.predict(handle_file(str(path)), api_name="/replay_load")
    assert "Replay loaded" in named(loaded, "/replay_load")["status"]
    frames = [loaded, *(client.predict(n, api_name="/replay_show") for n in (1, 5, 40))]
    assert "<img" not in json.dumps(frames) and "<a " not in json.dumps(frames)  # no tag, in any output
    stories = json.dumps([named(frame, "/replay_show")[f"{side}.story"] for frame in frames for side in SIDES])
    assert "a&#93;&#40;http&#58;" in stories  # the reason is there, as text
    for markup in ("](", "![", "http:", "www."):  # nor Markdown's image, link or autolink, in the Markdown
        assert markup not in stories, markup


def test_a_visitor_who_floods_holds_two_runs_which_stop_unread_and_another_visitor_goes_first(served) -> None:
    """Five long races sent and never read: two are taken (one decoding, one waiting), three refused by
    name; the taken ones stop once their updates pile up unread; another visitor's race waits for at
    most one of the flooder's turns and decodes what it decodes alone."""
    choice = served.registry.choice(EMBEDDED_LABEL)
    long = run_data(prompt=choice.examples[choice.paper_example], policy="vanilla", gen_len=256, block_len=32)
    sent = [post(served.url, "run", long, HOSTILE) for _ in range(5)]
    client = Client(served.url, verbose=False, headers={"X-Forwarded-For": "10.0.0.2"})
    a = args()
    job = client.submit(**a, api_name="/run")
    check_result(served.registry, a, job.result(timeout=120))
    statuses = [named(out)["status"] for out in job.outputs()]
    waiting = [status for status in statuses if "Waiting for the model" in status]
    assert all("Waiting for the model: 1 run ahead of yours" in w for w in waiting), waiting
    deadline = time.monotonic() + 120  # until every one has ended (reading a stream would be reading it)
    while any(event_id in served.demo._queue.event_ids_to_events for event_id in sent) and time.monotonic() < deadline:
        time.sleep(0.2)
    streams = [read(served.url, "run", event_id) for event_id in sent]
    lasts = [named(stream[-1][1], raw=True)["status"] for stream in streams]
    assert sum(BUSY in last for last in lasts) == 3
    taken = [stream for stream, last in zip(streams, lasts) if BUSY not in last]
    for stream in taken:  # stopped unread: never finished, no trace written
        assert all("finished" not in (data or [""])[0] for _, data in stream)
        assert "entropycache-trace-" not in json.dumps(stream)


def test_the_server_is_alive_after_all_this_and_a_race_is_what_it_is_alone(served) -> None:
    a = args(seed=3)
    check_result(served.registry, a, Client(served.url, verbose=False).predict(**a, api_name="/run"))
