"""Memory under many sessions: does the server stay flat while visitor after visitor loads a maximum trace,
and does the speedup a race shows stay what it was?

    python scripts/soak.py                      # 50 sessions, the short race (about 2 s) before and after
    python scripts/soak.py --sessions 10 --as-served   # the race a visitor finds on the page

It starts the app (`python app.py`, the embedded model) in a process of its own on 127.0.0.1 and a free
port, races once and reads the race's trace, then grows that trace to the longest a trace may be (a
prompt filling MAX_LENGTH positions, every step of the lane without a cache computing every row: some
15 MB of JSON, checked as the app checks it). Then --sessions visitors, each a gradio_client session of
its own, load it for replay one after the other; the server's resident memory is read after the first
and after every tenth. It prints the memory table, the ratio of the last to the first, whether the
first session's replay was dropped to make room (the store's caps, app/race/replay_store.py), and the
shown speedup of a race before and after. Loopback only; stops the server on the way out.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gradio_client import Client, handle_file  # noqa: E402
from load_test import Scenario, resident_mb, serve  # noqa: E402

from app.client import named  # noqa: E402
from app.race.replay_store import DROPPED  # noqa: E402
from app.race.trace_reader import MAX_LENGTH, read_trace  # noqa: E402
from app.serving.registry import build_registry  # noqa: E402


def longest(trace: dict, length: int = MAX_LENGTH) -> dict:
    """`trace` with its prompt grown to fill `length` positions, every full step computing every row."""
    out = copy.deepcopy(trace)
    gen, old = out["settings"]["gen_len"], len(out["prompt_ids"])
    new = length - gen
    out["prompt_ids"] = (out["prompt_ids"] * (new // old + 1))[:new]
    for lane in out["lanes"]:
        for event in lane["events"]:
            event["prompt_len"] = new
            event["unmasked"] = [p - old + new for p in event["unmasked"]]
            event["rows"] = (list(range(length)) if event["full"]
                             else [r - old + new if r >= old else r for r in event["rows"]])
            event["layer_rows"] = [len(event["rows"])] * len(event["layer_rows"])
    return out


def race_speedup(url: str, scenario: Scenario) -> tuple[float, dict]:
    """One race's shown speedup, and its trace (read where the server wrote it: loopback)."""
    out = named(Client(url, verbose=False, download_files=False).predict(**scenario.args(), api_name="/run"))
    trace = json.loads(Path(out["trace"]["path"]).read_text())
    return trace["speedup"], trace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--as-served", action="store_true", help="race the page's default race, not the short one")
    args = ap.parse_args(argv)
    if args.sessions < 1:
        ap.error(f"--sessions must be a positive integer, got {args.sessions}")
    scenario = Scenario.as_served(build_registry(cuda=False)) if args.as_served else Scenario.short()
    url, server = serve()
    try:
        before, trace = race_speedup(url, scenario)
        big = longest(trace)
        path = Path(tempfile.mkdtemp(prefix="soak-")) / "longest-trace.json"
        path.write_text(json.dumps(big))
        read_trace(path.read_bytes())  # the app would take it
        print(f"the trace: {path.stat().st_size / 2**20:.1f} MB, {len(big['prompt_ids'])} prompt tokens, "
              f"{sum(len(lane['events']) for lane in big['lanes'])} steps", flush=True)
        rss = {0: resident_mb(server.pid)}
        clients = []
        started = time.monotonic()
        for i in range(1, args.sessions + 1):
            client = Client(url, verbose=False, download_files=False)  # a session of its own
            loaded = named(client.predict(handle_file(str(path)), api_name="/replay_load"), "/replay_load")
            if "Replay loaded" not in loaded["status"]:
                raise RuntimeError(f"session {i}: the trace was not loaded: {loaded['status'][:300]}")
            clients.append(client)
            if i == 1 or i % 10 == 0 or i == args.sessions:
                rss[i] = resident_mb(server.pid)
                print(f"{i} sessions: {rss[i]:.0f} MB ({time.monotonic() - started:.0f} s)", flush=True)
        first = named(clients[0].predict(0, api_name="/replay_show"), "/replay_show")["status"]
        after, _ = race_speedup(url, scenario)
        print("\n| sessions, each holding a replay of the trace | server resident memory (MB) |\n|---|---|")
        for n, mb in rss.items():
            print(f"| {n} | {mb:.0f} |")
        print(f"\nafter {args.sessions} sessions / after 1: {rss[max(rss)] / rss[1]:.2f}x")
        print(f"the first session's replay {'was dropped' if DROPPED[:40] in first else 'is still kept'}")
        print(f"shown speedup: {before:.2f}x before, {after:.2f}x after")
        os.unlink(path)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
