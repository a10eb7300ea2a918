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
        assert [(r["prompt"], r["gen"]) for r in m["forward"]] == [(40, 32), (40, 64), (16, 32)]
        assert all(r["full_ms"] > 0 and r["partial_ms"] > 0 and r["floor_ms"] > 0 for r in m["forward"])
        for mode, rows in m["end_to_end"].items():
            for r, cost in zip(rows, m["forward"]):
                # the replayed schedule: at least the block starts are full, and never every step
                f = r["entropy"]["full_steps"]
                assert 0 < f < 1 and r["none"]["full_steps"] == 1 and 0 < r["entropy"]["decision"] < 1
                assert r["speedup"] == r["none"]["compute_s"] / r["entropy"]["compute_s"]
                assert r["ceiling"] == 1 / (f + (1 - f) * cost["partial_share"])  # from the forward costs
            if mode == "threshold 0.9":  # unmask counts replayed: fewer steps than tokens
                assert all(r["steps"] < r["gen"] for r in rows)
    schedules = report["schedules"]
    assert schedules["one token per step"]["tokens_per_step"] == 1
    assert schedules["threshold 0.9"]["tokens_per_step"] > 1
    assert [r["policy"] for r in report["embedded_bench"]] == list(TABLE_ORDER)
    assert [r["policy"] for r in report["embedded_bench_no_cudnn"]] == list(TABLE_ORDER)
    assert report["app"]["ok"] is True, report["app"]
    assert report["app"]["updates"] >= 1
    text = (tmp_path / "gpu_check.md").read_text()
    assert text in done.stdout and "## LLaDA-8B-Instruct shape" in text and "## The app:" in text


def test_without_a_gpu_the_real_run_refuses_clearly(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "no CUDA GPU here; use --dry-run" in done.stderr
