"""The README's Python examples run as written, on the embedded model."""

import math
import re
from pathlib import Path

from core.policies import POLICIES

README = Path(__file__).resolve().parents[1] / "README.md"


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
        POLICIES.pop("every-fourth", None)
    totals = namespace["last"].totals
    assert totals.full_steps == math.ceil(totals.steps / 4)
    printed = capsys.readouterr().out.strip()
    assert printed.endswith(f"the answer is 34 . | {totals.full_steps} full steps of {totals.steps}")


def test_core_generate_stays_the_function_when_the_cli_module_is_imported():
    """core/generate.py (the command line) shares its name with the function core.generate: importing
    the module, as core.bench does, must not turn the README's core.generate(...) into a module."""
    import importlib

    import core
    import core.decoder

    importlib.import_module("core.bench")
    cli = importlib.import_module("core.generate")
    assert core.generate is core.decoder.generate
    assert hasattr(cli, "main") and cli is not core.generate
