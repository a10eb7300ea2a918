"""The app as visitors meet it: launched in-process on 127.0.0.1, driven by gradio_client and a real browser
(the page fixture, tests/app/conftest.py)."""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phoning home from tests

import pytest  # noqa: E402
from folds import open_fold  # noqa: E402
from gradio_client import Client  # noqa: E402
from races import run_args  # noqa: E402

import app.drift.decode  # noqa: E402
import app.race.decode  # noqa: E402
from app.client import named  # noqa: E402
from app.controls.declared import PEER_CONTROLS, RUN_CONTROLS, raced_policies  # noqa: E402
from app.controls.run import RawRun, check_run  # noqa: E402
from app.drift.status import findings  # noqa: E402
from app.serving.device_thread import CPU_THREAD  # noqa: E402
from app.serving.examples import Example  # noqa: E402
from app.serving.registry import EMBEDDED_LABEL  # noqa: E402
from app.sweep.export import SWEEP_FORMAT  # noqa: E402
from app.sweep.render import sweep_table  # noqa: E402
from core.config import DecodeConfig  # noqa: E402
from core.decoder import decode, generate  # noqa: E402
from core.loading import chat_prompt_ids  # noqa: E402
from core.policies import make_policy  # noqa: E402
from evaluation.bench import sweep  # noqa: E402
from evaluation.diagnostics import Probe, drift_analysis  # noqa: E402
from evaluation.tasks import held_out  # noqa: E402
from evaluation.tasks.word_problems import make_split  # noqa: E402
from scripts.ports import free_port  # noqa: E402

MODEL = os.environ.get("ENTROPYCACHE_MODEL")  # None: the shipped embedded model
ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [p.prompt for p in make_split("test", 3)]


def unchanged(output: object) -> bool:
    """What an API client gets for an output the handler left as it was: an update with no value."""
    return (isinstance(output, dict) and output.get("__type__") == "update" and "value" not in output
            and "value" not in output.get("props", {}))


def refusal(out: tuple, api_name: str = "/run") -> str:
    """A refused input's answer to an API client of `api_name`: the status line says why, as text, and
    every other output is left as it was."""
    by_name = named(out, api_name)
    status = by_name.pop("status")
    assert 'class="ec-banner ec-refused"' in status and all(unchanged(o) for o in by_name.values()), out
    return html.unescape(re.sub("<[^>]+>", "", status))


def args(prompt: str = PROMPTS[0], **overrides) -> dict:
    """A race's inputs as an API client sends them: tau 0.5 at gen 32, block 16 (races.run_args)."""
    return run_args(prompt, **{"tau": 0.5, **overrides})


def expected(registry, a: dict) -> tuple:
    """What core decodes directly with these settings: one result per lane of the race, left to right."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, a["prompt"])
    controls = {key: a[key] for key in RUN_CONTROLS}
    own = {key: a[key] for key in PEER_CONTROLS if key in a}
    run = check_run(registry, RawRun(a["prompt"], EMBEDDED_LABEL, a["policy"], controls, own), raced_policies(),
                    against_ours=True)
    return tuple(generate(model, ids, lane.policy, lane.config) for lane in run.lanes)


def check_result(registry, a: dict, answer: tuple) -> dict:
    """A full run's outputs agree with a direct decode of the same prompt and settings; returns the trace."""
    out = named(answer)
    assert "finished" in out["status"] and "speedup" in out["status"]
    _, tokenizer = registry.get(EMBEDDED_LABEL)
    refs = expected(registry, a)
    sides = ("left", "middle", "right") if len(refs) == 3 else ("left", "right")
    texts = [tokenizer.decode(r.tokens[: r.totals.tokens], skip_special_tokens=True) for r in refs]
    assert [out[f"{side}.final"] or "" for side in sides] == texts
    assert [row[0] for row in out["summary"]["data"]] == list(sides)
    for side in sides:
        for part in ("entropy", "rows"):
            assert out[f"{side}.{part}"]["type"] == "plotly" and json.loads(out[f"{side}.{part}"]["plot"])["data"]
    assert "Where the time goes" in out["time"]
    trace = json.loads(Path(out["trace"]).read_text())
    assert trace["settings"]["prompt"] == a["prompt"] and trace["settings"]["seed"] == a["seed"]
    assert [lane["events"][-1]["tokens"] for lane in trace["lanes"]] == [r.tokens for r in refs]
    return trace


def test_client_full_run_completes_and_matches_core(served) -> None:
    url, registry = served.url, served.registry
    a = args(tau=10.0)
    out = Client(url, verbose=False).predict(**a, api_name="/run")
    trace = check_result(registry, a, out)
    assert trace["lanes"][1]["totals"]["rows_fraction"] < 1.0  # EntropyCache really reused rows


def test_client_race_with_a_peers_own_controls_matches_core(served) -> None:
    url, registry = served.url, served.registry
    a = args(policy="dllm-cache", dllm_cache_rho=0.5, dllm_cache_response_every=3)
    out = Client(url, verbose=False).predict(**a, api_name="/run")
    trace = check_result(registry, a, out)
    assert trace["lanes"][0]["policy"] == "dllm-cache(prompt_every=50, response_every=3, rho=0.5)"


def test_client_drift_run_matches_a_direct_probed_decode(served) -> None:
    url, registry = served.url, served.registry
    a = drift_args(PROMPTS[1])
    out = named(Client(url, verbose=False).predict(**a, api_name="/drift"), "/drift")
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, a["prompt"])
    events = list(decode(model, ids, make_policy("entropy", tau=a["tau"], k=a["k"]),
                         DecodeConfig(gen_len=a["gen_len"], block_len=a["block_len"]), before_step=Probe(model)))
    analysis = drift_analysis(events, model.config.eos_token_ids)
    assert "Done: " in out["status"] and html.escape(" ".join(findings(analysis))) in out["status"]
    last = events[-1]
    assert out["final"] == tokenizer.decode(last.tokens[: last.totals.tokens], skip_special_tokens=True)
    for plot in ("scatter", "staleness", "heatmap", "volatility"):
        assert out[plot]["type"] == "plotly" and json.loads(out[plot]["plot"])["data"]
    assert out["step"]["maximum"] == len(events) - 1 and f"**Step {len(events) - 1}**" in out["explanation"]


def test_client_sweep_matches_core_bench_and_a_picked_point_is_checked(served) -> None:
    url, registry = served.url, served.registry
    a = dict(model=EMBEDDED_LABEL, task="word problems", prompts="", taus="0.5, 3", ks="2", problems=2, gen_len=32,
             block_len=16, steps=0, threshold=0, metric="agreement")
    client = Client(url, verbose=False)
    out = named(client.predict(**a, api_name="/sweep"), "/sweep")
    assert out["metric"] == "agreement"  # the y axis radio says what the plot draws
    assert "Sweep done: 2 prompts" in out["status"]
    fig = json.loads(out["plot"]["plot"])
    assert [t["name"] for t in fig["data"]][:1] == ["k = 2"] and fig["data"][0]["customdata"] == [[0.5, 2], [3.0, 2]]
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    direct = sweep(model, tokenizer, held_out("words", 2), [0.5, 3.0], [2], DecodeConfig(gen_len=32, block_len=16))
    exact = [0, 1, 2, 5, 6, 7, 8, 9, 10]  # policy, tau, k, accuracy, agreement, first div., rows, full steps
    assert [[r[i] for i in exact] for r in out["table"]["data"]] == [[r[i] for i in exact] for r in sweep_table(direct)]
    record = json.loads(Path(next(f for f in out["downloads"] if f.endswith(".json"))).read_text())
    assert record["format"] == SWEEP_FORMAT and [r["label"] for r in record["rows"]] == [r["label"] for r in direct]
    assert [r["per_prompt"] for r in record["rows"]] == [r["per_prompt"] for r in direct]
    picked = named(client.predict("[3, 2, 1]", "accuracy", api_name="/sweep_pick"), "/sweep_pick")
    assert [picked[f"{tab}.{key}"] for tab in ("race", "drift") for key in ("tau", "k")] == [3, 2, 3, 2]
    assert "tau 3, k 2" in picked["loaded"] and "<b>tau 3, k 2</b>" in picked["point"]
    refused = client.predict("[99, 2, 1]", "accuracy", api_name="/sweep_pick")
    # the sliders, the message, the plot and the texts stay as they were
    assert "tau (EntropyCache) must be a number in [0, 12], got 99" in refusal(refused, "/sweep_pick")


BAD = [  # refused by the handler, in the status line
    (dict(prompt=""), "prompt: it is empty"),
    (dict(prompt="a " * 3001), "limit is 6000"),
    (dict(gen_len=100000), "100000"),  # the handler's own check: the sliders hand values on as sent
    (dict(block_len=5), "do not fit together: gen_len 32 is not a multiple of block_len 5"),
    (dict(steps=3), "do not fit together: steps 3 must be a multiple"),
    (dict(steps=2, threshold=0.9), "Set steps to 0 or the parallel-decoding threshold to 0"),
    (dict(k=2.5), "k \\(EntropyCache\\) must be an integer in \\[0, 64\\], got 2.5"),
    (dict(temperature=-1), "-1"),
    # a choice the page never offers (an API client's): the handler's check, not Gradio's
    (dict(model="/etc/passwd"), "Unknown model '/etc/passwd'; choose one of: sums-and-stories"),
    (dict(policy="entropy"), "Unknown policy 'entropy'; choose one of: vanilla, d2cache, "),
    (dict(policy="none"), "Unknown policy 'none'; choose one of: vanilla, d2cache, "),  # one name for the baseline
]


def test_client_replays_the_race_it_ran_and_refuses_a_bad_trace(served, tmp_path) -> None:
    from gradio_client import handle_file

    from app.race.replay import Replay
    from app.race.trace_reader import read_trace

    url = served.url
    client = Client(url, verbose=False)
    trace_file = named(client.predict(**args(policy="vanilla", threshold=0.9), api_name="/run"))["trace"]
    replay = Replay.of(read_trace(Path(trace_file).read_bytes()))
    assert [lane.side for lane in replay.trace.lanes] == ["left", "middle", "right"]
    loaded = named(client.predict(handle_file(trace_file), api_name="/replay_load"), "/replay_load")
    assert f"Replay loaded: frame 0 of {len(replay)}" in loaded["status"] and loaded["frame"] == 0
    n = len(replay) // 2
    shown = named(client.predict(n, api_name="/replay_show"), "/replay_show")  # the session's replay, at frame n
    assert f"Replay paused: frame {n} of {len(replay)}" in shown["status"] and shown["frame"] == n
    assert "the paper's comparison" in shown["status"] and shown["middle.final"]["visible"] is True
    for lane, count in zip(replay.trace.lanes, replay.counts(n)):
        # each lane's text at its step, numbered as the story and the plots number it (from 0)
        assert f"step {count - 1}: prompt rows recomputed" in shown[f"{lane.side}.text"]
        assert shown[f"{lane.side}.story"].startswith(f"**Step {count - 1}**")
    message = f"Replay frame must be a whole number from 0 to {len(replay)}; got -1"
    assert message in refusal(client.predict(-1, api_name="/replay_show"), "/replay_show")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "entropycache-trace/1"}')
    message = "the trace: missing model, settings, prompt_ids, speedup, lanes"
    assert message in refusal(client.predict(handle_file(str(bad)), api_name="/replay_load"), "/replay_load")


def test_client_bad_inputs_come_back_as_clear_messages(served) -> None:
    client = Client(served.url, verbose=False)
    for bad, message in BAD:
        assert re.search(message, refusal(client.predict(**args(**bad), api_name="/run")))


def drift_args(prompt: str = PROMPTS[0], **overrides) -> dict:
    return args(prompt, **{"policy": "entropy", **overrides})


SWEEP = dict(model=EMBEDDED_LABEL, task="word problems", prompts="", taus="0.5", ks="2", problems=1, gen_len=32,
             block_len=16, steps=0, threshold=0, metric="accuracy")
MALFORMED = [  # what a client may send past the page: each message names the control and its range
    ("/run", args(seed=2**40), "seed must be an integer in [0, 2147483647], got 1099511627776"),
    ("/run", args(tau="abc"), "tau (EntropyCache) must be a number in [0, 12], got 'abc'"),
    ("/run", args(k=None), "k (EntropyCache) must be an integer in [0, 64], got None"),
    ("/run", args(temperature=[1]), "temperature must be a number in [0, 2], got [1]"),
    ("/run", args(policy="dllm-cache", dllm_cache_rho=2), "rho (DLLMCache) must be a number in [0.05, 1], got 2"),
    ("/drift", drift_args(seed=2**40), "seed must be an integer in [0, 2147483647], got 1099511627776"),
    ("/drift", drift_args(tau="abc"), "tau (EntropyCache) must be a number in [0, 12], got 'abc'"),
    ("/drift", drift_args(k=None), "k (EntropyCache) must be an integer in [0, 64], got None"),
    ("/drift", drift_args(policy="elastic", elastic_gamma=-1), "gamma (ElasticCache) must be"),
    ("/sweep", SWEEP | dict(problems=10**6), "held-out prompts must be an integer in [1, 50], got 1000000"),
    ("/sweep", SWEEP | dict(problems="many"), "held-out prompts must be an integer in [1, 50], got 'many'"),
    ("/sweep", SWEEP | dict(gen_len=None), "gen length must be an integer in [1, 512], got None"),
    ("/sweep", SWEEP | dict(task="your prompts", prompts="mia has 7 marbles .\n\n" + "a " * 3001),
     "Line 3 of your prompts: The prompt is 6001 characters long; the limit is 6000."),
    ("/sweep", SWEEP | dict(task="your prompts", prompts="mia has 7 marbles .\nhello"),
     "Line 2 of your prompts: The model does not know 1 word of the prompt: 'hello'."),
]


@pytest.mark.parametrize(("api", "a", "message"), MALFORMED, ids=[f"{api} {m[:30]}" for api, _, m in MALFORMED])
def test_client_malformed_numbers_get_the_apps_own_message_naming_the_control(served, api, a, message) -> None:
    assert message in refusal(Client(served.url, verbose=False).predict(**a, api_name=api), api)


def test_client_a_choice_the_page_never_offers_is_refused_in_the_status_line(served) -> None:
    out = Client(served.url, verbose=False).predict(**drift_args(policy="none"), api_name="/drift")
    assert "Unknown policy 'none'; choose one of: entropy, d2cache, " in refusal(out, "/drift")


def test_client_malformed_picked_point_gets_a_message_not_the_parsers(served) -> None:
    client = Client(served.url, verbose=False)
    shape = "A picked point must be [tau, k], with tau a number in [0, 12] and k an integer in [0, 64];"
    for bad in ("{not json", "[1]", '"tau"', "x" * 300):
        assert shape in refusal(client.predict(bad, "accuracy", api_name="/sweep_pick"), "/sweep_pick")
    no_k = "k (EntropyCache) must be an integer in [0, 64], got None"
    assert no_k in refusal(client.predict("[0.5, null]", "accuracy", api_name="/sweep_pick"), "/sweep_pick")


UNREADABLE = [  # prompts a visitor may type, with the words the embedded model does not know
    ("<|mask|> mia has 7 marbles . how many marbles does mia have now ?", ["'<|'", "'mask'", "'|>'"]),
    ("hello", ["'hello'"]),
    ("write a poem about the sea", ["'write'", "'poem'", "'sea'"]),
    ("What is 12 plus 7?", ["'What'", "'plus'"]),
]


@pytest.fixture
def decodes(monkeypatch) -> list:
    """The prompt ids of every decode the served app starts (both tabs' decoders) while the test runs."""
    started = []
    for module in (app.race.decode, app.drift.decode):
        def recording(model, prompt_ids, *rest, _decode=module.decode, **kw):
            started.append(list(prompt_ids))
            return _decode(model, prompt_ids, *rest, **kw)

        monkeypatch.setattr(module, "decode", recording)
    return started


@pytest.mark.skipif(MODEL is not None, reason="the words are unknown to the embedded model's vocabulary")
@pytest.mark.parametrize(("prompt", "words"), UNREADABLE, ids=[p[:20] for p, _ in UNREADABLE])
def test_client_a_prompt_the_model_cannot_read_is_refused_before_decoding(served, decodes, prompt, words) -> None:
    client = Client(served.url, verbose=False)
    for api, a in (("/run", args(prompt)), ("/drift", drift_args(prompt))):
        message = refusal(client.predict(**a, api_name=api), api)
        n = len(words)
        assert f"does not know {n} word{'s' * (n != 1)} of the prompt: {', '.join(words)}." in message
        assert "trained only on short arithmetic word problems" in message
        assert "click one of the example prompts under the prompt box" in message
    assert decodes == []  # refused before any decode: no special token ever reached the model
    out = client.predict(**args(PROMPTS[0]), api_name="/run")  # the recorder sees a good prompt's decodes
    assert "finished" in named(out)["status"] and len(decodes) == 2


def test_every_step_of_a_cpu_decode_runs_on_the_decoding_thread(served, monkeypatch) -> None:
    """Not on the gradio worker thread that handles the visitor (app/serving/device_thread.py says why)."""
    stepped_on = set()

    def recording(*a, _decode=app.race.decode.decode, **kw):
        for event in _decode(*a, **kw):
            stepped_on.add(threading.get_ident())
            yield event

    monkeypatch.setattr(app.race.decode, "decode", recording)
    out = Client(served.url, verbose=False).predict(**args(), api_name="/run")
    assert "finished" in named(out)["status"]
    assert stepped_on == {CPU_THREAD.serving_thread} and None not in stepped_on


def test_no_arbitrary_path_is_served(served) -> None:
    url = served.url
    for path in ("/etc/passwd", str(ROOT / "app.py"), str(ROOT / "core" / "loading.py")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}gradio_api/file={path}", timeout=10)
        assert refused.value.code in (403, 404)


def test_several_clients_at_once_each_get_their_own_result(served) -> None:
    url, registry = served.url, served.registry
    runs = [
        args(p, seed=i, temperature=0.7, gen_len=16 * (i + 1), policy=pol)
        for i, (p, pol) in enumerate(zip(PROMPTS, ["vanilla", "dual", "dllm-cache"]))
    ]
    # one session each, from addresses of their own (one visitor has at most two runs under way)
    clients = [Client(url, verbose=False, headers={"X-Forwarded-For": f"10.0.0.{i}"}) for i in range(len(runs))]
    with ThreadPoolExecutor(len(runs)) as pool:
        outs = list(pool.map(lambda ca: ca[0].predict(**ca[1], api_name="/run"), zip(clients, runs)))
    for a, out in zip(runs, outs):
        check_result(registry, a, out)


def test_a_new_run_in_the_same_session_cancels_the_old_one(served) -> None:
    url, registry = served.url, served.registry
    client = Client(url, verbose=False)
    # Long, and replaced as soon as it has started: it cannot reach its end (even at an early end-of-text)
    old = client.submit(**args(gen_len=448, block_len=32), api_name="/run")
    deadline = time.time() + 60
    while not old.outputs() and time.time() < deadline:
        time.sleep(0.01)
    a = args(PROMPTS[1])
    new = client.submit(**a, api_name="/run")
    check_result(registry, a, new.result(timeout=120))
    assert old.done()
    last = old.outputs()[-1]
    assert "finished" not in last[0]  # it never ran to the end: no final banner, no trace
    assert len(old.outputs()) < 40


def test_browser_runs_a_race_and_shows_text_and_both_plots(page) -> None:
    # The page opens on the paper's comparison: vanilla against EntropyCache with parallel decoding, on
    # the long example, and a middle lane (vanilla at EntropyCache's settings) for the two factors.
    page.locator("#preset-cache-alone").click()
    page.wait_for_function("document.querySelector('#ctl-threshold input').value === '0'", timeout=30_000)
    page.locator("#preset-paper").click()
    page.wait_for_function("document.querySelector('#ctl-threshold input').value === '0.9'", timeout=30_000)
    page.locator("#run-btn").click(timeout=60_000)
    for side in ("left", "middle", "right"):
        page.locator(f"#text-{side} .ec-text").wait_for(timeout=60_000)
        page.locator(f"#entropy-{side} .js-plotly-plot").wait_for(timeout=60_000)
        page.locator(f"#rows-{side} .js-plotly-plot").wait_for(timeout=60_000)
    page.wait_for_function(
        "document.querySelector('#banner').innerText.includes('speedup (measured)')", timeout=180_000
    )
    banner = page.locator("#banner").inner_text()
    assert "from parallel decoding (left to middle)" in banner and "the paper's comparison" in banner
    assert "Where the time goes" in page.locator("#time-panel").inner_text()
    parted = page.locator("#parted")
    parted.locator(".ec-pair").wait_for(timeout=30_000)
    assert "Where the texts part." in parted.inner_text() and parted.locator(".ec-col-head").count() == 3
    assert page.locator("#text-right .ec-text span").count() > 0
    speeds = "".join(page.locator(f"#speed-{side}").inner_text() for side in ("left", "middle", "right"))
    assert "finished first" in speeds and "one token per step" in speeds
    link = page.locator("#trace a[download]")
    link.wait_for(timeout=30_000)
    trace = page.request.get(link.get_attribute("href")).json()
    assert [lane["side"] for lane in trace["lanes"]] == ["left", "middle", "right"]
    assert len(page.screenshot(full_page=True)) > 10_000
    # On a projector's 1366x768 screen a lane's panel, text, entropy trace and heatmap fit together, the
    # lanes' texts side by side.
    page.set_viewport_size({"width": 1366, "height": 768})
    for side in ("left", "middle", "right"):
        top, bottom = (page.locator(f"#{part}-{side}").bounding_box() for part in ("speed", "rows"))
        assert bottom["y"] + bottom["height"] - top["y"] <= 768, side
    texts = [page.locator(f"#text-{side}").bounding_box() for side in ("left", "middle", "right")]
    assert texts[0]["x"] < texts[1]["x"] < texts[2]["x"] and abs(texts[0]["y"] - texts[2]["y"]) < 40


def test_browser_replays_a_race_step_by_step_with_the_keyboard(page) -> None:
    from app.race.replay import Replay
    from app.race.trace_reader import read_trace

    page.locator("#run-btn").click(timeout=60_000)
    link = page.locator("#trace a[download]")
    link.wait_for(timeout=300_000)  # the paper's race: ~15 s here, ~40 s with the CPUs taken by others
    replay = Replay.of(read_trace(page.request.get(link.get_attribute("href")).body()))
    page.locator("#replay-race").click()
    page.wait_for_function("document.querySelector('#banner').innerText.includes('Replay loaded: frame 0')",
                           timeout=30_000)
    for n in (1, 2, 3, 4, 5):  # right arrow: one frame forward
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"document.querySelector('#banner').innerText.includes('frame {n} of')",
                               timeout=30_000)
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("document.querySelector('#banner').innerText.includes('frame 4 of')", timeout=30_000)
    for lane, count in zip(replay.trace.lanes, replay.counts(4)):
        text = page.locator(f"#text-{lane.side}").inner_text()
        story = page.locator(f"#story-{lane.side}").inner_text()
        if count:
            assert f"step {count - 1}: prompt rows recomputed" in text and f"Step {count - 1} (block 0)" in story
        else:
            assert "No step yet" in story
    page.get_by_label("100x").check()
    page.keyboard.press(" ")  # space: play
    page.wait_for_function("document.querySelector('#banner').innerText.includes('Replay playing at 100x')",
                           timeout=30_000)
    page.keyboard.press(" ")  # space: pause
    page.wait_for_function("document.querySelector('#banner').innerText.includes('Replay paused')", timeout=30_000)
    page.wait_for_timeout(1_000)  # anything a late frame would still draw
    banner = page.locator("#banner").inner_text()
    n = int(re.search(r"Replay paused: frame (\d+) of", banner).group(1))
    assert "playing" not in banner
    for lane, count in zip(replay.trace.lanes, replay.counts(n)):  # the screen shows the frame it names
        if count:
            assert f"step {count - 1}: prompt rows recomputed" in page.locator(f"#text-{lane.side}").inner_text()


def test_browser_runs_diagnostics_and_explains_a_chosen_step(page) -> None:
    page.get_by_role("tab", name="Drift").click(timeout=60_000)
    page.locator("#drift-run-btn").click(timeout=60_000)
    for part in ("scatter", "heatmap", "volatility"):
        page.locator(f"#drift-{part} .js-plotly-plot").wait_for(timeout=60_000)
    page.wait_for_function(  # ~30 s here, ~60 s with the CPUs taken by others: room for a machine 3x slower
        "document.querySelector('#drift-banner').innerText.includes('Done')", timeout=300_000
    )
    # the scatter covers every step: its x axis reaches the largest entropy plotted, and tau's line is in it
    top, largest, tau_lines = page.locator("#drift-scatter .js-plotly-plot").evaluate(
        "gd => [gd.layout.xaxis.range[1], Math.max(...gd.data.flatMap(t => t.x)), (gd.layout.shapes || []).length]")
    assert top >= largest > 1.0 and tau_lines == 1  # the default story decodes steps above tau 1
    page.wait_for_function(
        "document.querySelector('#drift-explain').innerText.includes('This was the last step')",
        timeout=30_000,
    )
    number = page.locator("#drift-step input[type=number]")
    number.fill("3")
    number.press("Enter")
    page.wait_for_function(
        "document.querySelector('#drift-explain').innerText.includes('Step 3 (block 0)')", timeout=30_000
    )
    assert len(page.screenshot(full_page=True)) > 10_000


def test_browser_sweeps_your_prompts_and_a_clicked_point_shows_both_texts_and_loads_its_settings(page) -> None:
    """Three prompts pasted, one per line, a 2-tau sweep at gen length 32: the point of tau 12 (full steps only
    where a block starts) shows each prompt's two texts side by side, a difference marked."""
    stories = [item.prompt for item in held_out("stories", 3)]
    page.get_by_role("tab", name="Sweep").click(timeout=60_000)
    page.locator("#sweep-prompts textarea").fill("hello there")
    # picked in the page, with no round trip to the server: a Run pressed right away already sweeps these prompts
    assert page.locator('#sweep-task input[value="your prompts"]').is_checked()
    page.locator("#sweep-run-btn").click(timeout=60_000)
    page.wait_for_function("document.querySelector('#sweep-banner').innerText.includes('held-out sets')",
                           timeout=60_000)
    assert "example prompts" not in page.locator("#sweep-banner").inner_text()  # this tab has none
    page.locator("#sweep-prompts textarea").fill("\n".join(stories))  # typing prompts picks "your prompts"
    page.wait_for_function("document.querySelector('#sweep-task input[value=\"your prompts\"]').checked",
                           timeout=30_000)
    page.locator("#sweep-taus textarea").fill("0.5, 12")
    page.locator("#sweep-ks textarea").fill("2")
    open_fold(page, "#sweep-decoding", "Decoding", "input[type=number]")
    for key in ("gen_len", "block_len"):
        number = page.locator(f"#sweep-ctl-{key} input[type=number]")
        number.fill("32" if key == "gen_len" else "16")
        number.press("Enter")
    page.locator("#sweep-run-btn").click(timeout=60_000)
    page.locator("#sweep-progress").wait_for(timeout=60_000)  # the progress bar shows while it runs
    page.wait_for_function(
        "document.querySelector('#sweep-banner').innerText.includes('Sweep done: 3 prompts')", timeout=180_000
    )
    command = page.locator("#sweep-banner").inner_text()
    assert "--prompts prompts.txt" in command and "--gen-len 32 --block 16" in command  # swept as typed
    # asked for accuracy, the plot draws agreement (your prompts have no right answers): the radio says so
    page.wait_for_function("document.querySelector('#sweep-metric input[value=\"agreement\"]').checked",
                           timeout=30_000)
    points = page.locator("#sweep-pareto .scatterlayer .trace").first.locator("path.point")
    points.nth(1).wait_for(timeout=30_000)
    assert points.count() == 2
    points.nth(1).scroll_into_view_if_needed()
    box = points.nth(1).bounding_box()  # tau 12, k 2
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.locator("#sweep-point .ec-diff").first.wait_for(timeout=30_000)
    cards = page.locator("#sweep-point .ec-prompt")
    assert cards.count() == 3 and "tau 12, k 2" in page.locator("#sweep-loaded").inner_text()
    for card, prompt in zip(cards.all(), stories):
        assert prompt in card.inner_text() and card.locator(".ec-pair .ec-text").count() == 2  # side by side
    assert page.locator("#sweep-point .ec-parted").count() >= 1
    assert page.locator("#sweep-downloads a[download]").count() == 4  # points, texts, JSON, your prompts
    page.locator("#sweep-higher").click()  # tau 12 is the highest: said, not a silent click
    page.wait_for_function("document.querySelector('#sweep-loaded').innerText.includes('No higher tau at k 2')",
                           timeout=30_000)
    assert len(page.screenshot(full_page=True)) > 10_000
    page.get_by_role("tab", name="Race").click()
    assert page.locator("#ctl-tau input[type=number]").input_value() == "12"
    assert page.locator("#ctl-k input[type=number]").input_value() == "2"


def load_entry():
    """app.py as a module (its name would otherwise clash with the app/ package)."""
    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_app_py_refuses_a_bad_model_folder_before_serving(tmp_path, capsys, monkeypatch) -> None:
    import app.serving.registry

    if MODEL:
        monkeypatch.setattr(app.serving.registry, "EMBEDDED", Path(MODEL))
    entry = load_entry()
    assert entry.main(["--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has no config.json" in err and str(tmp_path) in err
    a = entry.parse_args([])
    assert (a.host, a.share, a.model) == (os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), False, [])


@pytest.mark.parametrize("threads", ["0", "-1", "999"])
def test_app_py_refuses_a_thread_count_outside_the_cpus_it_has(threads, capsys) -> None:
    entry = load_entry()
    assert entry.main(["--threads", threads]) == 2
    cores = len(os.sched_getaffinity(0))  # Linux, as CI
    err = capsys.readouterr().err
    assert f"--threads must be from 1 to {cores} (the CPUs this process may use), got {threads}" in err


def test_app_py_refuses_a_port_it_cannot_serve_on_before_loading_a_model(capsys) -> None:
    entry = load_entry()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert entry.main(["--host", "127.0.0.1", "--port", str(port)]) == 2
    assert f"cannot serve on --host 127.0.0.1 --port {port} (Address already in use)" in capsys.readouterr().err
    for port in ("0", "70000"):
        assert entry.main(["--port", port]) == 2
        assert f"--port must be from 1 to 65535, got {port}" in capsys.readouterr().err


def test_app_py_decodes_with_every_cpu_but_one_by_default() -> None:
    assert load_entry().parse_args([]).threads == max(1, len(os.sched_getaffinity(0)) - 1)


def test_app_py_takes_the_graphs_switch_and_refuses_another_word(capsys) -> None:
    entry = load_entry()
    assert entry.parse_args([]).graphs == "auto" and entry.parse_args(["--graphs", "on"]).graphs == "on"
    with pytest.raises(SystemExit):
        entry.parse_args(["--graphs", "fast"])
    assert "argument --graphs: invalid choice: 'fast'" in capsys.readouterr().err


def test_the_warm_up_readies_the_race_a_visitor_finds_on_the_page(registry) -> None:
    """With graphs on, a model's warm-up makes the workspaces (on a GPU: captures the graphs) a race of the
    Race's opening preset needs, on the model's long example, one per lane, before any visitor's race."""
    from app.controls.presets import DEFAULT_PRESET
    from app.race.tab import preset_shape
    from app.serving.context import warm_up
    from core.passes import idle_workspaces, release_graphs

    model, tokenizer = registry.get(EMBEDDED_LABEL)
    choice = registry.choice(EMBEDDED_LABEL)
    shapes = (preset_shape(DEFAULT_PRESET),)  # what the Race tab hands the context (tests/app/race/test_race_tab.py)
    release_graphs(model)
    assert warm_up(model, tokenizer, choice, "auto", shapes) == 0.0 and idle_workspaces(model) == []  # a CPU: off
    assert warm_up(model, tokenizer, choice, "on", shapes) == 0.0  # a CPU captures nothing, but the buffers are made
    length = len(chat_prompt_ids(tokenizer, choice.examples[choice.paper_example])) + 256
    assert DEFAULT_PRESET.lanes == 3 and DEFAULT_PRESET.controls()["gen_len"] == 256
    assert [w.length for w in idle_workspaces(model)].count(length) == 3
    release_graphs(model)
    # a model whose tokenizer cannot read its long example (LLaDA's layout with a tokenizer of its own)
    # warms up without capturing ahead, rather than refusing every visitor's prompt with the example's words
    unreadable = dataclasses.replace(choice, example_list=(Example("Lily can run 12 kilometers per hour.", "", {},
                                                                   True),))
    assert warm_up(model, tokenizer, unreadable, "on", shapes) == 0.0
    assert [w.length for w in idle_workspaces(model)] == [8 + 8]  # the tiny decode's own: none for the example
    release_graphs(model)


def test_python_app_py_prints_its_local_url_and_serves_there() -> None:
    port = free_port()
    # `python app.py --port P`, with the embedded model swapped for ENTROPYCACHE_MODEL when that is set
    code = (
        "import pathlib, runpy, sys\n"
        "import app.serving.registry\n"
        "if sys.argv[1]: app.serving.registry.EMBEDDED = pathlib.Path(sys.argv[1])\n"
        "sys.argv = ['app.py', '--port', sys.argv[2]]\n"
        "runpy.run_path('app.py', run_name='__main__')\n"
    )
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, MODEL or "", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    url = f"http://127.0.0.1:{port}/"
    seen = []
    try:
        deadline = time.time() + 120
        while not any("running at" in line for line in seen) and time.time() < deadline:
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)
        assert f"running at {url}" in "".join(seen)
        assert urllib.request.urlopen(url, timeout=10).status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)

