"""scripts/gpu_check.py --dry-run: the GPU check's whole code path on the CPU with tiny shapes,
so that the one call a GPU machine allows does not fail on a bug a CPU could have found."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.passes import ROW_BUCKETS
from core.policies import TABLE_ORDER
from scripts.gpu_checks.peak import card_peak

ROOT = Path(__file__).resolve().parents[2]
PATHS = ("unfused", "fused")


def test_dry_run_measures_everything_and_races_the_app(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path),
                           "--commit", "abc1234"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["commit"] == "abc1234" and report["command"].startswith("gpu_check.py --dry-run --out")
    assert report["peak"] == {"card": None, "peak_tflops": None, "note": "unknown card (cpu (dry run)): no peak to "
                                                                        "compare with"}
    assert set(report["models"]) == {"LLaDA-8B-Instruct", "Dream-v0-Instruct-7B"}
    for m in report["models"].values():
        assert m["fusion"] == "compiled" and m["compile_s"] > 0  # the dry run traces the parts (eager backend)
        assert [(r["prompt"], r["gen"]) for r in m["forward"]] == [(40, 32), (8, 32)]
        for r in m["forward"]:
            for path in ("eager", *PATHS):
                assert r[f"{path}_full_ms"] > 0 and r[f"{path}_partial_ms"] > 0
            for path in PATHS:
                length = r["prompt"] + r["gen"]
                assert r[f"{path}_full_of_peak"] is None  # no peak known for a CPU
                assert r[f"{path}_partial_over_floor"] == pytest.approx(r[f"{path}_partial_ms"] / r["floor_ms"])
                assert r[f"{path}_partial_gb_s"] == pytest.approx(m["weight_gb"] / r[f"{path}_partial_ms"] * 1e3)
                assert r[f"{path}_full_tflops"] > 0 and length > 0
        assert [c["rows"] for c in m["rows_curve"]] == [b for b in ROW_BUCKETS if b < 72] + [72]  # 40 + 32
        assert all(c["ms"] > 0 and c["over_floor"] > 0 for c in m["rows_curve"])
        for kind, rows in (("full", 72), ("partial", 48)):
            a = m["attention"][kind]
            assert a["rows"] == rows and a["default"] and a["default_ms"] > 0
            assert isinstance(a["alone_ms"]["math"], float)
            assert a["alone_ms"]["cudnn_attention"].startswith("refused: ")  # a CPU has no cuDNN
        for mode, rows in m["end_to_end"].items():
            for r, cost in zip(rows, m["forward"]):
                for path in PATHS:
                    f = r[f"entropy_{path}"]["full_steps"]  # the replayed schedule: block starts full, not every step
                    assert 0 < f < 1 and r[f"none_{path}"]["full_steps"] == 1
                    assert r[f"speedup_{path}"] == (r[f"none_{path}"]["s_per_token"]
                                                    / r[f"entropy_{path}"]["s_per_token"])
                    assert r[f"ceiling_{path}"] == 1 / (f + (1 - f) * cost[f"{path}_partial_share"])
                    assert r[f"entropy_{path}"]["capture_s"] == 0  # nothing is captured on a CPU
                assert r["vs_dual"] == r["dual_fused"]["s_per_token"] / r["entropy_fused"]["s_per_token"]
                assert r["gain_none"] == r["none_unfused"]["s_per_token"] / r["none_fused"]["s_per_token"]
                assert r["dual_fused"]["full_steps"] < 1 and "dual_unfused" not in r
            if mode == "one token per step":  # timed over the first block
                assert all(r[f"{p}_fused"]["steps"] == 32 for r in rows for p in ("none", "entropy", "dual"))
            else:  # unmask counts replayed: fewer steps than tokens, compared with one token per step
                assert all(r["steps"] < r["gen"] and r["vs_vanilla_fused"] > 0 for r in rows)
        # on a CPU the fused parts run the same operations as the eager ones (traced, not compiled), so
        # both comparisons hold by construction here; the GPU check is where they are a finding
        assert m["equality"] == {name: {"fused_equals_own_eager": True, "agreement_with_unfused": 1.0}
                                 for name in ("none", "entropy")}
        assert m["syncs"] is None  # counted on a GPU only
    schedules = report["schedules"]
    assert schedules["one token per step"]["tokens_per_step"] == 1
    assert schedules["threshold 0.9"]["tokens_per_step"] > 1
    assert [r["policy"] for r in report["embedded_bench"]] == list(TABLE_ORDER)
    app = report["app"]
    assert app["ok"] is True, app
    long, chat = app["races"]["long"], app["races"]["chat"]
    assert long["finished"] and chat["finished"] and "finished" in app["after_cancel_banner"]
    assert len(long["prompt_ids"]) > len(chat["prompt_ids"]) and long["gen"] == 32  # the passage: a long prompt
    assert "Where the time goes" in long["time_panel"]
    assert "EntropyCache against vanilla decoding (no cache)" in long["banner"]
    assert app["offline"]["speedup"] == app["offline"]["none_s"] / app["offline"]["entropy_s"]
    text = (tmp_path / "gpu_check.md").read_text()
    assert text in done.stdout and "## LLaDA-8B-Instruct shape" in text and "## The app:" in text
    assert "commit abc1234" in text and "Command: gpu_check.py --dry-run" in text
    assert text.count("graphed full pass at 40 + 32 >= 65% of the card's dense bf16 peak: NOT met 0 TFLOPS, "
                      "unknown card") == 2  # the targets, per shape
    assert text.count("each fused graphed decode equals its own eager run token for token: met") == 2
    assert "- the app: races finish, and one after a cancelled race: met" in text
    assert f"- the app's race at LLaDA's shape, {len(long['prompt_ids'])} + 32: banner within 15% of the same " \
           "decode offline:" in text
    assert "prompt_ids" not in text  # the report's text leaves the ids out


@pytest.mark.parametrize("name, sms, peak, note", [
    ("NVIDIA H100 80GB HBM3", 132, 989.4, ""),
    ("NVIDIA H100 PCIe", 114, 756.0, ""),
    ("NVIDIA H200", 132, 989.4, ""),
    ("NVIDIA A100-SXM4-80GB", 108, 312.0, ""),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, 503.8, ""),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 94, 251.9, "94 of its 188 SMs: 50% of 503.8 TFLOPS"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 188, None,
     "RTX PRO 6000 Blackwell Max-Q: no datasheet peak in the table"),
    ("Tesla T4", 40, None, "unknown card (Tesla T4): no peak to compare with"),
])
def test_the_cards_peak_comes_from_its_name_and_a_partition_gets_its_share(name, sms, peak, note):
    found = card_peak(name, sms)
    assert found["note"] == note
    assert found["peak_tflops"] == (pytest.approx(peak) if peak else None)


def test_without_a_gpu_the_real_run_refuses_clearly(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "no CUDA GPU here; use --dry-run" in done.stderr
