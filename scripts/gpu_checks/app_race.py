"""The app's part: app.py serving the LLaDA-shaped folder, raced through gradio_client (the long passage,
a chat-sized prompt, a cancelled race and one after it), and the long race decoded offline, the figure
its banner is held against."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from app.controls.declared import RUN_CONTROLS, VANILLA
from core.config import DecodeConfig
from core.decoder import decode
from core.fusion import set_fusion
from core.policies import make_policy
from scripts.gpu_checks.llada_folder import prose_tokenizer, write_llada_layout
from scripts.gpu_checks.shapes import BLOCK, ROOT, SHAPES, K, build, free


def app_race_args(label: str, prompt: str, gen_len: int) -> dict:
    """A race of no cache against EntropyCache at tau 12 nats, above any entropy a random 126k-token model
    gives (ln 126464 = 11.7): with random weights entropy means nothing, so only block starts refresh,
    the schedule the offline figures replay. Every other control the race takes is sent by its declared
    name at its declared default (app/controls/declared.py: 0 for an optional setting left unset)."""
    controls = {key: control.default for key, control in RUN_CONTROLS.items()}
    return dict(prompt=prompt, model=label, policy=VANILLA, **{**controls, "tau": 12.0, "k": K, "gen_len": gen_len,
                                                               "block_len": BLOCK})


def app_check(folder: Path, dry: bool) -> dict:
    """app.py with --model folder, raced through gradio_client: the long passage (at gen 256), a chat-sized
    prompt (at gen 128), a cancelled race and one after it. Each finished race's banner speedup, its
    time panel in words, and the long race's prompt ids (for the offline figure at its length)."""
    try:
        from gradio_client import Client

        from app.client import named
        from app.serving.examples import CHAT_EXAMPLES
        from app.serving.long_prompts import LONG_PROMPTS
        from app.serving.registry import build_registry
        from scripts.ports import free_port
    except ImportError as e:
        return {"ok": False, "skipped": f"gradio_client is not installed here ({e}); carry the app's wheels"}
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--model", str(folder)],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}/", time.time() + 600
        while "running at" not in Path(log.name).read_text():
            if server.poll() is not None or time.time() > deadline:
                return {"ok": False, "error": "the app did not start", "log": Path(log.name).read_text()[-3000:]}
            time.sleep(1)
        client = Client(url, verbose=False)
        label = build_registry([str(folder)]).labels[-1]  # the label the app gives the folder
        races = {}
        for name, prompt, gen in (("long", LONG_PROMPTS[1].text, 32 if dry else 256),
                                  ("chat", CHAT_EXAMPLES[0], 32 if dry else 128)):
            t0 = time.time()
            out = named(client.predict(**app_race_args(label, prompt, gen), api_name="/run"))
            trace = json.loads(Path(out["trace"]).read_text())
            races[name] = dict(wall_s=time.time() - t0, gen=gen, prompt_ids=trace["prompt_ids"],
                               speedup=trace["speedup"], banner=plain(out["status"])[:600],
                               time_panel=plain(out["time"])[:2000], finished=finished(out["status"]))
        long = client.submit(**app_race_args(label, LONG_PROMPTS[1].text, 64 if dry else 512), api_name="/run")
        time.sleep(2 if not dry else 0.5)
        long.cancel()
        again = named(client.predict(**app_race_args(label, CHAT_EXAMPLES[0], 32 if dry else 128), api_name="/run"))
        return {"ok": all(r["finished"] for r in races.values()) and finished(again["status"]), "races": races,
                "after_cancel_banner": plain(again["status"])[:400]}
    except Exception as e:  # noqa: BLE001 -- the check reports what broke
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "log": Path(log.name).read_text()[-3000:]}
    finally:
        server.terminate()
        server.wait(timeout=30)


def finished(banner: str) -> bool:
    """A race's last status line says it finished with a speedup (not a refusal, not an error)."""
    return "finished" in banner and "speedup" in banner and "ec-refused" not in banner


def app_summary(app: dict) -> dict:
    """The app's part of the report as printed: without the server's log and the prompts' ids."""
    races = {name: {k: v for k, v in race.items() if k != "prompt_ids"} for name, race in app.get("races", {}).items()}
    return {k: v for k, v in app.items() if k != "log"} | ({"races": races} if races else {})


def plain(html_text: str) -> str:
    """An HTML output as the words a visitor reads."""
    import html
    import re

    return " ".join(html.unescape(re.sub("<[^>]+>", " ", html_text)).split())


def offline_race(device: torch.device, dry: bool, prompt_ids: list[int], gen_len: int) -> dict:
    """The app's long race decoded here without the app, at its prompt ids and settings, both lanes
    graphed with the app's default kernels (on the CPU: the same padded passes, eagerly): none against
    EntropyCache at tau 12, each decoded once to capture its graphs and then timed, interleaved."""
    model = build(SHAPES["LLaDA-8B-Instruct"], device, dry)
    set_fusion(model, "auto")  # as the app loads it (core/fusion.py)
    config = DecodeConfig(gen_len=gen_len, block_len=BLOCK, graphs="on")
    policies = {"none": lambda: make_policy("none"), "entropy": lambda: make_policy("entropy", tau=12.0, k=K)}
    seconds = {}
    for timed in (False, True):
        for name, policy in policies.items():
            events = list(decode(model, prompt_ids, policy(), config))
            if timed:
                seconds[name] = sum(e.compute_s for e in events)
    del model
    free()
    return dict(none_s=seconds["none"], entropy_s=seconds["entropy"], speedup=seconds["none"] / seconds["entropy"])


def app_part(device: torch.device, dry: bool) -> dict:
    """app_check on a random model of LLaDA's full shape in its file layout (16 GB, written to a temporary
    folder), with a tokenizer that reads the long examples; then the long race offline, for the figure
    its banner is held against."""
    with tempfile.TemporaryDirectory() as folder:
        model = build(SHAPES["LLaDA-8B-Instruct"], device, dry)
        write_llada_layout(model, Path(folder) / "llada-shaped", prose_tokenizer(300 if dry else 4096))
        del model
        free()
        result = app_check(Path(folder) / "llada-shaped", dry)
    if result["ok"]:
        long = result["races"]["long"]
        result["offline"] = offline_race(device, dry, long["prompt_ids"], long["gen"])
    return result
