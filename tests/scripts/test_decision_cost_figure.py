"""scripts/decision_cost_figure.py: a context sweep's rows into the figure and its table."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_figure_and_table_show_each_policys_cost_by_context_length(tmp_path):
    rows = [
        {"label": "none", "prompt_len": 300.4, "decision_us_per_step": 0.0},
        {"label": "entropy(tau=0.5, k=2)", "prompt_len": 300.4, "decision_us_per_step": 41.2},
        {"label": "none", "prompt_len": 40.0, "decision_us_per_step": 0.0},
        {"label": "entropy(tau=0.5, k=2)", "prompt_len": 40.0, "decision_us_per_step": 39.6},
    ]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    out = subprocess.run([sys.executable, "scripts/decision_cost_figure.py", str(tmp_path / "rows.json"),
                          str(tmp_path / "fig.html")], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "| policy | 40 tokens | 300 tokens |",
        "|---|---|---|",
        "| none | 0 | 0 |",
        "| entropy(tau=0.5, k=2) | 40 | 41 |",
    ]
    html = (tmp_path / "fig.html").read_text()
    assert "Decision cost per step" in html and "entropy(tau=0.5, k=2)" in html
    (tmp_path / "empty.json").write_text("[]")
    bad = subprocess.run([sys.executable, "scripts/decision_cost_figure.py", str(tmp_path / "empty.json"),
                          str(tmp_path / "x.html")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "holds no bench rows" in bad.stderr
