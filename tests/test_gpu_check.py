"""scripts/gpu_check.py --dry-run: the GPU check's whole code path on the CPU with tiny shapes,
so that the one call a GPU machine allows does not fail on a bug a CPU could have found."""

import json
import subprocess
import sys
from pathlib import Path

from core.policies import TABLE_ORDER

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_measures_everything_and_races_the_app(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(report["models"]) == {"LLaDA-8B-Instruct", "Dream-v0-Instruct-7B"}
    for m in report["models"].values():
        assert [(r["prompt"], r["gen"]) for r in m["forward"]] == [(40, 32), (40, 64), (16, 32), (8, 32)]
        for r in m["forward"]:
            assert min(r["full_ms"], r["partial_ms"], r["graphed_full_ms"], r["graphed_partial_ms"], r["floor_ms"]) > 0
        for mode, rows in m["end_to_end"].items():
            for r, cost in zip(rows, m["forward"]):
                for graphs, share in (("off", cost["partial_share"]), ("on", cost["graphed_partial_share"])):
                    f = r[f"entropy_{graphs}"]["full_steps"]  # the replayed schedule: block starts full, not every step
                    assert 0 < f < 1 and r[f"none_{graphs}"]["full_steps"] == 1
                    assert r[f"speedup_{graphs}"] == (r[f"none_{graphs}"]["s_per_token"]
                                                      / r[f"entropy_{graphs}"]["s_per_token"])
                    assert r[f"ceiling_{graphs}"] == 1 / (f + (1 - f) * share)  # from the pass costs
                    assert r[f"entropy_{graphs}"]["capture_s"] == 0  # nothing is captured on a CPU
            if mode == "one token per step":  # timed over the first two blocks
                assert all(r["entropy_on"]["steps"] == r["none_on"]["steps"] == 64 or r["gen"] < 64 for r in rows)
            else:  # unmask counts replayed: fewer steps than tokens, compared with one token per step
                assert all(r["steps"] < r["gen"] and r["vs_vanilla_on"] > 0 for r in rows)
        # on a CPU both sides run the same eager passes: the dry run checks the report, the GPU the claim
        assert all(isinstance(v["graphed_equals_static_eager"], bool) for v in m["equality"].values())
        assert m["syncs"] is None  # counted on a GPU only
    schedules = report["schedules"]
    assert schedules["one token per step"]["tokens_per_step"] == 1
    assert schedules["threshold 0.9"]["tokens_per_step"] > 1
    assert [r["policy"] for r in report["embedded_bench"]] == list(TABLE_ORDER)
    assert [r["policy"] for r in report["embedded_bench_eager"]] == list(TABLE_ORDER)
    app = report["app"]
    assert app["ok"] is True, app
    long, chat = app["races"]["long"], app["races"]["chat"]
    assert long["finished"] and chat["finished"] and "finished" in app["after_cancel_banner"]
    assert len(long["prompt_ids"]) > len(chat["prompt_ids"]) and long["gen"] == 32  # the passage: a long prompt
    assert "Where the time goes" in long["time_panel"] and "EntropyCache against no cache" in long["banner"]
    assert app["offline"]["speedup"] == app["offline"]["none_s"] / app["offline"]["entropy_s"]
    text = (tmp_path / "gpu_check.md").read_text()
    assert text in done.stdout and "## LLaDA-8B-Instruct shape" in text and "## The app:" in text
    assert text.count("graphed speedup at 40 + 32, one token per step >= 4x") == 2  # the targets, per shape
    assert "- the app: races finish, and one after a cancelled race: met" in text
    assert f"- the app's race at LLaDA's shape, {len(long['prompt_ids'])} + 32: banner within 15% of the same " \
           "decode offline:" in text
    assert "prompt_ids" not in text  # the report's text leaves the ids out


def test_without_a_gpu_the_real_run_refuses_clearly(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "no CUDA GPU here; use --dry-run" in done.stderr
