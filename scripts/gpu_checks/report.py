"""The report: the targets checked, gpu_check.md's tables, gpu_check.json saved as the check goes, the
commit checked."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from scripts.gpu_checks.app_race import app_summary
from scripts.gpu_checks.shapes import MODES, ROOT

LEVEL = 0.98  # "level with dual": within 2%, what repeated graphed timings of one decode spread by (98-102% of
# the schedule's ceiling in the H100 report)


def targets(report: dict) -> list[str]:
    """The targets, each with what was measured and whether it is met."""
    lines = []
    for name, m in report["models"].items():
        one, par = m["end_to_end"][MODES[0]], m["end_to_end"][MODES[1]]
        main, pass_main = one[0], m["forward"][0]
        shape = f"{main['prompt']} + {main['gen']}"
        of_peak = pass_main["fused_full_of_peak"]
        checks = [
            (f"graphed full pass at {shape} >= 65% of the card's dense bf16 peak",
             of_peak is not None and of_peak >= 0.65, f"{pass_main['fused_full_tflops']:.0f} TFLOPS, "
             + (f"{of_peak:.0%}" if of_peak is not None else report["peak"]["note"])),
            (f"graphed partial pass at {shape} <= 1.25x the weight-read floor",
             pass_main["fused_partial_over_floor"] <= 1.25,
             f"{pass_main['fused_partial_over_floor']:.2f}x (max over shapes "
             f"{max(r['fused_partial_over_floor'] for r in m['forward']):.2f}x)"),
            (f"tokens/s of the exact decoder and EntropyCache at {shape} >= 1.4x today's (fused over unfused)",
             min(main["gain_none"], main["gain_entropy"]) >= 1.4,
             f"{main['gain_none']:.2f}x / {main['gain_entropy']:.2f}x"),
            (f"EntropyCache over graphed none at {shape}, one token per step >= 4x", main["speedup_fused"] >= 4,
             f"{main['speedup_fused']:.2f}x"),
            ("... never below 1.0x at any shape (both modes)", min(r["speedup_fused"] for r in one + par) >= 1,
             f"min {min(r['speedup_fused'] for r in one + par):.2f}x"),
            (f"EntropyCache level with graphed dual at every shape (>= {LEVEL}x, both modes)",
             min(r["vs_dual"] for r in one + par) >= LEVEL, f"min {min(r['vs_dual'] for r in one + par):.2f}x"),
            ("each fused graphed decode equals its own eager run token for token",
             all(v["fused_equals_own_eager"] for v in m["equality"].values()), ""),
            ("... and agrees with today's unfused path on >= 99% of positions",
             min(v["agreement_with_unfused"] for v in m["equality"].values()) >= 0.99,
             f"min {min(v['agreement_with_unfused'] for v in m['equality'].values()):.3f}"),
            ("every pointwise part compiled (none fell back to eager)", m["fusion"] == "compiled", m["fusion"]),
        ]
        lines += [f"- {name}: {what}: {'met' if ok else 'NOT met'} {value}".rstrip() for what, ok, value in checks]
    if "app" in report and report["app"].get("ok") is not None:
        app = report["app"]
        met = "met" if app["ok"] else "NOT met"
        lines.append(f"- the app: races finish, and one after a cancelled race: {met}")
        if "offline" in app:
            shown, offline = app["races"]["long"]["speedup"], app["offline"]["speedup"]
            ok = abs(shown / offline - 1) <= 0.15
            lines.append(f"- the app's race at LLaDA's shape, {len(app['races']['long']['prompt_ids'])} + "
                         f"{app['races']['long']['gen']}: banner within 15% of the same decode offline: "
                         f"{'met' if ok else 'NOT met'} {shown:.2f}x against {offline:.2f}x "
                         f"(chat-sized prompt: {app['races']['chat']['speedup']:.2f}x)")
    return lines


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    head = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return head + ["| " + " | ".join(r) + " |" for r in rows]


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def markdown(report: dict) -> str:
    peak = report["peak"]
    lines = [f"GPU check, {report['date']}, {report['device']}, torch {report['torch']}, commit {report['commit']}",
             f"Command: {report['command']}",
             f"Copy bandwidth {report['bandwidth_gb_s']:.0f} GB/s; dense bf16 peak "
             + (f"{peak['peak_tflops']:.0f} TFLOPS ({peak['card']}{'; ' + peak['note'] if peak['note'] else ''})"
                if peak["peak_tflops"] else peak["note"]), ""]
    for name, m in report["models"].items():
        floor = m["forward"][0]["floor_ms"]
        lines += [f"## {name} shape, random weights ({m['weight_gb']:.1f} GB read per pass, floor {floor:.2f} ms)", "",
                  f"Pointwise parts: {m['fusion']} (compiling took {m['compile_s']:.1f} s).", ""]
        lines += table(["prompt + gen", "full ms eager / graphed / fused", "full TFLOPS (of peak) graphed / fused",
                        "partial ms eager / graphed / fused", "partial GB/s (x floor) graphed / fused",
                        "partial / full fused"], [
            [f"{r['prompt']} + {r['gen']}",
             f"{r['eager_full_ms']:.2f} / {r['unfused_full_ms']:.2f} / {r['fused_full_ms']:.2f}",
             f"{r['unfused_full_tflops']:.0f} ({percent(r['unfused_full_of_peak'])}) / "
             f"{r['fused_full_tflops']:.0f} ({percent(r['fused_full_of_peak'])})",
             f"{r['eager_partial_ms']:.2f} / {r['unfused_partial_ms']:.2f} / {r['fused_partial_ms']:.2f}",
             f"{r['unfused_partial_gb_s']:.0f} ({r['unfused_partial_over_floor']:.2f}x) / "
             f"{r['fused_partial_gb_s']:.0f} ({r['fused_partial_over_floor']:.2f}x)",
             f"{r['fused_partial_share']:.3f}"] for r in m["forward"]])
        curve = m["rows_curve"]
        lines += ["", f"A fused graphed pass by rows computed at {curve[-1]['rows']} positions:", ""]
        lines += table(["rows", *(str(c["rows"]) for c in curve)],
                       [["ms", *(f"{c['ms']:.2f}" for c in curve)],
                        ["x floor", *(f"{c['over_floor']:.2f}" for c in curve)],
                        ["TFLOPS", *(f"{c['tflops']:.0f}" for c in curve)]])
        lines += ["", "Attention alone, as the model calls it (ms; the backend torch picks by itself first; why a "
                  "backend refused is in the JSON):", ""]
        backends = list(next(iter(m["attention"].values()))["alone_ms"])
        lines += table(["pass", "rows", "torch picks", "ms", *backends], [
            [kind, str(a["rows"]), ", ".join(a["default"]).replace("aten::_scaled_dot_product_", ""),
             f"{a['default_ms']:.3f}",
             *(f"{v:.3f}" if isinstance(v, float) else "refused" for v in a["alone_ms"].values())]
            for kind, a in m["attention"].items()])
        for mode, rows in m["end_to_end"].items():
            lines += ["", f"End to end, {mode}, graphed (tokens/s; EntropyCache against none, against dual, "
                      "and the fused path against today's unfused one):", ""]
            extra = ["vs one token per step"] if mode != MODES[0] else []
            lines += table(["prompt + gen", "steps", "tok/s none / entropy / dual fused", "tok/s none / entropy today",
                            "speedup fused (today)", "of ceiling", "vs dual", "fused / today none, entropy",
                            "full steps", "decision", "peak GiB", *extra], [
                [f"{r['prompt']} + {r['gen']}", str(r["steps"]),
                 " / ".join(f"{r[f'{p}_fused']['tokens_per_s']:.1f}" for p in ("none", "entropy", "dual")),
                 " / ".join(f"{r[f'{p}_unfused']['tokens_per_s']:.1f}" for p in ("none", "entropy")),
                 f"{r['speedup_fused']:.2f}x ({r['speedup_unfused']:.2f}x)", f"{r['of_ceiling_fused']:.0%}",
                 f"{r['vs_dual']:.2f}x", f"{r['gain_none']:.2f}x, {r['gain_entropy']:.2f}x",
                 f"{r['entropy_fused']['full_steps']:.3f}", f"{r['entropy_fused']['decision']:.2%}",
                 f"{r['entropy_fused']['peak_gib'] or 0:.1f}",
                 *([f"{r['vs_vanilla_fused']:.1f}x"] if extra else [])] for r in rows])
        lines += ["", f"Token equality: {json.dumps(m['equality'])}", f"Host syncs per graphed step: "
                  f"{json.dumps(m['syncs'])}", ""]
    lines += ["## The embedded model's bench on this device (speedup over none, graphed)", ""]
    lines += table(["policy", "acc", "agree", "speedup", "decision"], [
        [r["label"], f"{r['accuracy']:.3f}", f"{r['agreement']:.3f}", f"{r['speedup']:.2f}x",
         f"{r['decision_overhead']:.2%}"] for r in report["embedded_bench"]])
    lines += ["", f"## The app: {json.dumps(app_summary(report['app']))}", "", "## Targets", "", *targets(report)]
    return "\n".join(lines) + "\n"


def save(out: Path, report: dict) -> None:
    """The report so far, so that a run stopped at its time limit still returns what it measured."""
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"saved at {time.strftime('%H:%M:%S')}: {', '.join(report['models'])}", flush=True)


def head_commit() -> str:
    """git's HEAD where the check runs, if it is a git checkout (a copied working tree is not)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (pass --commit)"
    return done.stdout.strip() if done.returncode == 0 else "unknown (pass --commit)"
