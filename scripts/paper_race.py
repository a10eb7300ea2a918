"""The Race's paper preset (or the cache alone) on the embedded model, against the bench on the same
prompt, in one run.

    python scripts/paper_race.py              # 3 rounds: ~1.5 minutes on 2 CPU cores
    python scripts/paper_race.py --rounds 5 --json runs/paper_race.json
    python scripts/paper_race.py --preset cache-alone   # EntropyCache against no cache, one token per step

Each round races the preset as the app does (app.controls.run.check_run builds the lanes, and
app.race.decode.race_snapshots steps them on the shared compute clock: vanilla decoding, no cache at
threshold 0.9, EntropyCache at threshold 0.9, gen 256, block 32, on the model's long example, a word
problem after four worked examples), then benches that same prompt as `python -m evaluation bench --task
words --shots 4 --n 1 --threshold 0.9 --policies none,entropy` does (its `vs vanilla`). It prints, per
round and as medians: the race's speedup and its two factors, each from two lanes' clocks; the bench's
figure for the prompt and how far the race is from it; whether EntropyCache's answer is vanilla's;
how far the time panel's parts are from each lane's clock; and the full and partial pass costs the
panel shows against evaluation.forward_cost's for the same length and rows. With --preset cache-alone
the race has two lanes (no cache, EntropyCache, one token per step) and the bench's figure is its
`speedup`. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from app.controls.declared import raced_policies  # noqa: E402
from app.controls.presets import PAPER, PRESETS, Preset  # noqa: E402
from app.controls.run import RawRun, check_run  # noqa: E402
from app.race.decode import race_snapshots  # noqa: E402
from app.race.time_panel import pass_costs  # noqa: E402
from app.serving.device_thread import decode_threads  # noqa: E402
from app.serving.registry import EMBEDDED_LABEL, build_registry  # noqa: E402
from core.config import DecodeConfig  # noqa: E402
from core.loading import answer_text, chat_prompt_ids  # noqa: E402
from evaluation.bench import Contender, bench_progress, bench_rows  # noqa: E402
from evaluation.forward_cost import TimeSplit, forward_costs  # noqa: E402
from evaluation.outputs import unwritable, write_json  # noqa: E402
from evaluation.tasks import held_out  # noqa: E402


def race_round(registry, prompt: str, preset: Preset) -> dict:
    """The preset raced as the app races it; its figures and its lanes' time splits."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    run = check_run(registry, RawRun(prompt, EMBEDDED_LABEL, preset.policy, preset.controls(), {}), raced_policies(),
                    against_ours=True)
    *_, last = race_snapshots(model, chat_prompt_ids(tokenizer, prompt), run, throttle_s=60)
    left, right = last.lanes[0], last.lanes[-1]
    middle = last.lanes[1] if len(last.lanes) == 3 else left  # two lanes: the whole speedup is the cache's
    splits = [TimeSplit.of(lane.events) for lane in last.lanes]
    full, partial, rows = pass_costs(splits)
    answers = [answer_text(tokenizer, lane.last) for lane in last.lanes]
    events = [e for lane in last.lanes for e in lane.events]
    return dict(speedup=left.clock / right.clock, parallel=left.clock / middle.clock, cache=middle.clock / right.clock,
                same_answer=answers[0] == answers[-1], parts_off=max(abs(s.total_s / lane.clock - 1)
                                                                    for s, lane in zip(splits, last.lanes)),
                full_ms=full * 1e3, partial_ms=partial * 1e3, partial_rows=rows,
                full_logits=statistics.mean(read_logits(e, model) for e in events if e.full),
                partial_logits=statistics.mean(read_logits(e, model) for e in events if not e.full),
                length=len(last.lanes[0].last.tokens) + last.lanes[0].last.prompt_len)


def read_logits(event, model) -> int:
    """The logit rows a step read: its block's positions still masked before it."""
    block_len = PAPER.controls()["block_len"]
    block = event.tokens[event.block * block_len : (event.block + 1) * block_len]
    return block.count(model.config.mask_token_id) + len(event.unmasked)


def bench_round(registry, item, preset: Preset) -> float:
    """The bench at the preset's settings on the one prompt (`bench --threshold 0.9` for the paper's):
    EntropyCache's speedup over the vanilla decoder."""
    model, tokenizer = registry.get(EMBEDDED_LABEL)
    threshold = preset.controls().get("threshold") or None  # a control at 0: off
    config = DecodeConfig.for_model(model.config, threshold=threshold)
    contenders = [Contender("none", {}), Contender("entropy", {})]
    rows = bench_rows(bench_progress(model, tokenizer, [item], contenders, config), bar=False)
    return next(r for r in rows if r["policy"] == "entropy")["speedup_vs_vanilla" if threshold else "speedup"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--preset", choices=[p.key for p in PRESETS], default=PAPER.key)
    ap.add_argument("--json", type=Path, help="write every round's figures here")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be a positive integer, got {args.rounds}")
    if args.json and (problem := unwritable(args.json)):  # before the rounds, whose figures it would lose
        ap.error(f"--json {str(args.json)!r}: {problem}")
    torch.set_num_threads(decode_threads())  # the app's team
    registry = build_registry(cuda=False)
    choice = registry.choice(EMBEDDED_LABEL)
    prompt = choice.examples[choice.paper_example]
    item = held_out("words", 1, shots=4)[0]
    if item.prompt != prompt:
        raise SystemExit("the model's long example is not the bench's first 4-shot problem")
    preset = next(p for p in PRESETS if p.key == args.preset)
    race_round(registry, prompt, preset)  # warm-up: first calls allocate and pick kernels
    rounds = []
    for i in range(args.rounds):
        r = race_round(registry, prompt, preset) | {"bench_vs_vanilla": bench_round(registry, item, preset)}
        model = registry.get(EMBEDDED_LABEL)[0]
        length, rows = r["length"], round(r["partial_rows"])
        full = forward_costs(model, length, [length], logit_rows=round(r["full_logits"]))[length]
        partial = forward_costs(model, length, [rows], logit_rows=round(r["partial_logits"]))[rows]
        r |= {"forward_cost_full_ms": full * 1e3, "forward_cost_partial_ms": partial * 1e3}
        rounds.append(r)
        print(f"round {i + 1}: race {r['speedup']:.2f}x = {r['parallel']:.2f}x parallel x {r['cache']:.2f}x cache; "
              f"bench {r['bench_vs_vanilla']:.2f}x; same answer {r['same_answer']}; parts off the clock by "
              f"{r['parts_off']:.1e}; full pass {r['full_ms']:.1f} ms (forward_cost {r['forward_cost_full_ms']:.1f}); "
              f"partial {r['partial_ms']:.2f} ms over {r['partial_rows']:.1f} rows (forward_cost "
              f"{r['forward_cost_partial_ms']:.2f})", flush=True)
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0] if not isinstance(rounds[0][key], bool)}
    print(f"median of {args.rounds}: race {med['speedup']:.2f}x ({med['parallel']:.2f}x x {med['cache']:.2f}x), "
          f"bench {med['bench_vs_vanilla']:.2f}x, race / bench {med['speedup'] / med['bench_vs_vanilla']:.3f}; "
          f"full pass {med['full_ms'] / med['forward_cost_full_ms']:.3f} of forward_cost's, partial "
          f"{med['partial_ms'] / med['forward_cost_partial_ms']:.3f}; every answer the same: "
          f"{all(r['same_answer'] for r in rounds)}")
    if args.json:
        write_json(args.json, rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
