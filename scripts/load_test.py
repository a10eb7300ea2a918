"""The app under load: several visitors race at once on loopback; is the speedup they are shown still true?

    python scripts/load_test.py                       # 1, 2, 4, 8 visitors, 3 races each
    python scripts/load_test.py --visitors 1,8,1 --races 4   # load bracketed by races alone
    python scripts/load_test.py --visitors 2 --races 2 --memory 0
    python scripts/load_test.py --visitors 1 --races 1 --memory 100   # resident memory over 100 races
    python scripts/load_test.py --short --visitors 2 --races 2        # 2 s races (the test suite's)
    python scripts/load_test.py --story --visitors 1,8,1 --races 4    # the story, no cache against EntropyCache

Every visitor races what a visitor gets by pressing Run on the page as it opens (the default preset,
the paper's comparison, on the embedded model's long example), with --story the first example (a
story, no cache against EntropyCache at gen 256), or with --short a word problem of 64 tokens, no cache
against EntropyCache. It starts the app (`python app.py`, the embedded model) in a
process of its own on 127.0.0.1 and a free port, so the visitors' clients, which run here, never
share the server's interpreter (in a real deployment they are browsers elsewhere). For each visitor
count it runs that many gradio_client visitors at once, each racing that prompt and settings
`--races` times, and prints races/s, latency p50/max, the shown speedup's spread (the largest
relative distance of any race's speedup from the median speedup of all races run alone), how many
races were more than 10% from it, how far the speedups vary (sd over mean) and the CPU time the
server and the clients spent per race; then the races with no app, alone and under load pooled, to
say whether load spreads one race's number more than the machine alone does. Every race's final
texts are checked against direct decodes of core. Loopback only; bounded by the counts and by
--max-seconds, after which it stops by itself (and stops the server). With --memory N it also runs N
races in a row and reports the server's resident memory after the first 10 and after all N. With
--no-app N it first races the same prompt N times in this process, through the same interleaver but
without the app (the server idle): the spread the machine itself gives a race, in the same minutes
as the levels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from gradio_client import Client  # noqa: E402

from app.client import named  # noqa: E402
from app.controls.declared import PEER_CONTROLS, RUN_CONTROLS, VANILLA, raced_policies  # noqa: E402
from app.controls.presets import DEFAULT_PRESET  # noqa: E402
from app.controls.run import RawRun, Run, check_run  # noqa: E402
from app.race.decode import race_snapshots  # noqa: E402
from app.serving.admission import PROXY_ENV  # noqa: E402
from app.serving.device_thread import decode_threads  # noqa: E402
from app.serving.registry import EMBEDDED_LABEL, build_registry  # noqa: E402
from core.decoder import generate  # noqa: E402
from core.loading import answer_text, chat_prompt_ids  # noqa: E402
from evaluation.tasks.word_problems import make_split  # noqa: E402
from scripts.ports import free_port  # noqa: E402


@dataclass
class Level:
    visitors: int
    races: int
    wall_s: float
    latencies: list[float]
    speedups: list[float]
    wrong: int  # races whose final texts differ from the direct decodes
    server_cpu_s: float = 0.0  # the server's CPU time (every thread) over the level
    client_cpu_s: float = 0.0  # this process's: the visitors' clients

    @property
    def races_per_s(self) -> float:
        return self.races / self.wall_s

    def distances(self, alone: float) -> list[float]:
        """Each race's shown speedup, as its relative distance from `alone`."""
        return [abs(s - alone) / alone for s in self.speedups]

    def spread(self, alone: float) -> float:
        return max(self.distances(alone))

    def over(self, alone: float, bound: float = 0.10) -> int:
        """How many races were shown a speedup more than `bound` away from `alone`."""
        return sum(d > bound for d in self.distances(alone))


def variation(speedups: list[float]) -> float:
    """The speedups' sample standard deviation over their mean: how far one race's number moves."""
    return statistics.stdev(speedups) / statistics.mean(speedups) if len(speedups) > 1 else 0.0


def pooled(name: str, levels: list[Level]) -> str:
    """One line on every race of `levels` together: how many, their median and their variation."""
    speedups = [s for lv in levels for s in lv.speedups]
    if not speedups:
        return f"{name}: no races"
    return (f"{name}: {len(speedups)} races, median {statistics.median(speedups):.2f}x, "
            f"sd {variation(speedups):.1%} of the mean")


@dataclass(frozen=True)
class Scenario:
    """What every visitor races: a prompt, the compared lane and every control."""

    prompt: str
    policy: str
    controls: dict  # every Race control, by key

    @classmethod
    def as_served(cls, registry) -> Scenario:
        """What a visitor gets by pressing Run on the opened page: the default preset on the model's long
        example."""
        choice = registry.choice(EMBEDDED_LABEL)
        return cls(choice.examples[choice.paper_example], DEFAULT_PRESET.policy, DEFAULT_PRESET.controls())

    @classmethod
    def story(cls, registry) -> Scenario:
        """The model's first example (a story) with the settings picking it sets, no cache against
        EntropyCache, gen 256: what Run raced before the Race opened on the paper's comparison."""
        choice = registry.choice(EMBEDDED_LABEL)
        defaults = {key: control.default for key, control in RUN_CONTROLS.items()}
        lengths = {"gen_len": choice.gen_len, "block_len": choice.block_len}  # the model's, as the page opens
        return cls(choice.example_list[0].text, VANILLA, {**defaults, **lengths, **choice.example_list[0].settings})

    @classmethod
    def short(cls) -> Scenario:
        """A word problem, 64 tokens, no cache against EntropyCache: a race of about 2 s (the test suite's)."""
        defaults = {key: control.default for key, control in RUN_CONTROLS.items()}
        return cls(make_split("test", 1)[0].prompt, VANILLA, {**defaults, "gen_len": 64, "block_len": 32})

    def args(self) -> dict:
        peers = {key: control.default for key, control in PEER_CONTROLS.items()}
        return {"prompt": self.prompt, "model": EMBEDDED_LABEL, "policy": self.policy, **self.controls, **peers}

    def run(self, registry) -> Run:
        """The race as the app builds it (its lanes' policies are new: one Run per race)."""
        raw = RawRun(self.prompt, EMBEDDED_LABEL, self.policy, dict(self.controls), {})
        return check_run(registry, raw, raced_policies(), against_ours=True)


def direct_texts(registry, scenario: Scenario) -> list[str]:
    """The final texts of every lane, decoded by core without the app."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, scenario.prompt)
    return [answer_text(tokenizer, generate(model, ids, lane.policy, lane.config))
            for lane in scenario.run(registry).lanes]


def no_app_level(registry, scenario: Scenario, races: int) -> Level:
    """The race `races` times in this process without the app: the same interleaver (app.race.decode), no
    rendering, no server work (visitors 0 in the table)."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    ids = chat_prompt_ids(tokenizer, scenario.prompt)
    speedups, latencies = [], []
    start, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(races):
        began = time.perf_counter()
        *_, last = race_snapshots(model, ids, scenario.run(registry), throttle_s=60)
        speedups.append(last.lanes[0].clock / last.lanes[-1].clock)
        latencies.append(time.perf_counter() - began)
    return Level(0, races, time.perf_counter() - start, latencies, speedups, 0,
                 client_cpu_s=time.process_time() - cpu0)


def run_level(url: str, visitors: int, races: int, scenario: Scenario, expected: list[str], deadline: float
              ) -> Level:
    """`visitors` clients at once, each racing `races` times (or until the deadline)."""
    latencies, speedups, wrong, lock = [], [], [0], threading.Lock()

    addresses = iter(range(visitors))

    def visitor() -> None:
        # The trace is read where the server wrote it (loopback: the same machine), not fetched over
        # HTTP as gradio_client would by default: a browser fetches it only when its visitor clicks.
        # Each visitor from an address of its own (one address has at most two runs under way).
        with lock:
            address = f"10.0.0.{next(addresses)}"
        client = Client(url, verbose=False, download_files=False, headers={"X-Forwarded-For": address})
        for _ in range(races):
            if time.monotonic() > deadline:
                return
            start = time.perf_counter()
            out = named(client.predict(**scenario.args(), api_name="/run"))
            took = time.perf_counter() - start
            trace = json.loads(Path(out["trace"]["path"]).read_text())
            with lock:
                latencies.append(took)
                speedups.append(trace["speedup"])
                wrong[0] += [out[f"{lane['side']}.final"] or "" for lane in trace["lanes"]] != expected

    threads = [threading.Thread(target=visitor) for _ in range(visitors)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Level(visitors, len(latencies), time.perf_counter() - start, latencies, speedups, wrong[0])


def cpu_s(pid: int) -> float:
    """A process's CPU time so far, user + system, every thread."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured_level(url: str, server_pid: int, *args) -> Level:
    """run_level, with the CPU time the server and the clients spent on it."""
    server0, client0 = cpu_s(server_pid), time.process_time()
    level = run_level(url, *args)
    level.server_cpu_s, level.client_cpu_s = cpu_s(server_pid) - server0, time.process_time() - client0
    return level


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


ROOT = Path(__file__).resolve().parent.parent


def serve(timeout_s: float = 180.0) -> tuple[str, subprocess.Popen]:
    """`python app.py` on a free loopback port, in its own process: (url, process), once it answers."""
    port = free_port()
    # Its visitors are told apart by X-Forwarded-For, as behind a Space's proxy (app/serving/admission.py).
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", PROXY_ENV: "1"}
    server = subprocess.Popen([sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"app.py exited with code {server.returncode} before serving")
        try:
            Client(url, verbose=False)
            return url, server
        except Exception:  # not listening yet
            time.sleep(1)
    server.kill()
    raise RuntimeError(f"app.py did not answer within {timeout_s:.0f} s")


@dataclass(frozen=True)
class Served:
    url: str
    pid: int  # the server's process
    scenario: Scenario  # what every visitor races
    expected: list[str]  # every lane's final text, decoded directly by core
    registry: object  # this process's own models (the direct decodes)


@contextmanager
def served_app(race: str = "served") -> Iterator[Served]:
    """The app serving in its own process, warmed by one race alone and one pair at once (a queued race
    takes paths a lone one never does); stopped on the way out."""
    registry = build_registry(cuda=False)  # here only for the direct decodes the results are checked against
    scenario = {"served": Scenario.as_served, "story": Scenario.story,
                "short": lambda _: Scenario.short()}[race](registry)
    expected = direct_texts(registry, scenario)
    url, server = serve()
    try:
        Client(url, verbose=False).predict(**scenario.args(), api_name="/run")
        run_level(url, 2, 1, scenario, expected, time.monotonic() + 300)
        yield Served(url, server.pid, scenario, expected, registry)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--visitors", default="1,2,4,8", help="comma list of visitor counts")
    ap.add_argument("--races", type=int, default=3, help="races per visitor at each count")
    ap.add_argument("--memory", type=int, default=0, help="then N races in a row, reporting resident memory")
    ap.add_argument("--no-app", type=int, default=0, help="first N races in this process without the app")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--short", action="store_true", help="a word problem, gen 64, instead of the opened page's race")
    which.add_argument("--story", action="store_true", help="the first example (a story), none against EntropyCache")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="stop starting races after this long")
    args = ap.parse_args(argv)
    try:
        counts = [int(v) for v in args.visitors.split(",")]
    except ValueError:
        ap.error(f"--visitors must be a comma list of whole numbers, got {args.visitors!r}")
    if min(counts) < 1 or max(counts) > 16 or not 1 <= args.races <= 20:
        ap.error("--visitors must be in 1..16 and --races in 1..20")
    if not 0 <= args.no_app <= 50:
        ap.error("--no-app must be in 0..50")
    if args.memory and not 10 <= args.memory <= 1000:
        ap.error("--memory must be 0 (off) or in 10..1000: it reports memory after the first 10 races")
    deadline = time.monotonic() + args.max_seconds
    torch.set_num_threads(decode_threads())  # the no-app races decode with the app's team (app.py)
    with served_app("short" if args.short else "story" if args.story else "served") as app:
        no_app = [no_app_level(app.registry, app.scenario, args.no_app)] if args.no_app else []
        served = [measured_level(app.url, app.pid, n, args.races, app.scenario, app.expected, deadline)
                  for n in counts]
        # Races alone, pooled over every 1-visitor level (`--visitors 1,8,1` brackets a load level, so
        # the machine's own drift over the run is in the reference too).
        alone_levels = [lv for lv in served if lv.visitors == 1]
        alone = statistics.median([s for lv in alone_levels for s in lv.speedups] or served[0].speedups)
        levels = no_app + served
        sc = app.scenario
        print(f"race: {sc.prompt[:60]!r}... {sc.policy} against entropy, gen {sc.controls['gen_len']}, block "
              f"{sc.controls['block_len']}, threshold {sc.controls['threshold']}; speedup alone (median): "
              f"{alone:.2f}x; decode threads {decode_threads()} of {os.cpu_count()} CPUs")
        print("| visitors (0: no app) | races | races/s | latency p50 | latency max | speedups shown | spread vs alone "
              "| over 10% | sd | wrong | CPU s a race: server, clients (0: this process) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for lv in levels:
            shown = ", ".join(f"{s:.2f}" for s in lv.speedups)
            print(f"| {lv.visitors} | {lv.races} | {lv.races_per_s:.2f} | {statistics.median(lv.latencies):.2f} s | "
                  f"{max(lv.latencies):.2f} s | {shown} | {lv.spread(alone):.1%} | {lv.over(alone)} | "
                  f"{variation(lv.speedups):.1%} | {lv.wrong} | "
                  f"{lv.server_cpu_s / lv.races:.2f}, {lv.client_cpu_s / lv.races:.2f} |")
        # Is a race's number spread more under load than alone? Compare the pools, not single races.
        print(pooled("no app", no_app))
        print(pooled("alone (1 visitor)", alone_levels))
        print(pooled("under load (2+ visitors)", [lv for lv in served if lv.visitors > 1]))
        if args.memory:
            client = Client(app.url, verbose=False)
            for i in range(args.memory):
                client.predict(**app.scenario.args(), api_name="/run")
                if i + 1 == 10:
                    after_10 = resident_mb(app.pid)
            end = resident_mb(app.pid)
            print(f"resident memory: {after_10:.0f} MB after 10 races, {end:.0f} MB after {args.memory} "
                  f"({end / after_10 - 1:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
