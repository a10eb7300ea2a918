"""The README's Python examples run as written, on the embedded model."""

import math
import re
import subprocess
import sys
from pathlib import Path

from core.policies import POLICIES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run(capsys):
    blocks = python_blocks()
    assert len(blocks) == 2
    decode_example, policy_example = blocks
    exec(decode_example, {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("0 True ") and len(lines) > 1  # one line per step, the first one full
    assert "the answer is 34 ." in lines[-1]  # 7 + 10 = 17, doubled
    namespace: dict = {}
    try:
        exec(policy_example, namespace)
    finally:
        POLICIES.pop("every-n", None)
    totals = namespace["last"].totals
    assert totals.full_steps == math.ceil(totals.steps / 4)
    printed = capsys.readouterr().out.strip()
    assert printed.endswith(f"the answer is 34 . | {totals.full_steps} full steps of {totals.steps}")


def test_core_generate_stays_the_function_after_the_cli_bench_and_app_are_imported():
    """No module of the package may be named like the function core.generate: importing a submodule
    rebinds the package attribute, and the README's core.generate(...) would call a module. A fresh
    interpreter, so that no other test's imports count."""
    check = ("import core, evaluation.cli, evaluation.bench, app.ui, core.decoder; "
             "assert core.generate is core.decoder.generate")
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
