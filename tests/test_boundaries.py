"""The package boundaries: the decoder library (core) imports no UI, app, training or evaluation code,
evaluation imports no UI, app or training code, training imports no UI or app code, and in the app
only the modules that meet the browser import gradio.

ruff enforces them: core/ruff.toml, evaluation/ruff.toml, training/ruff.toml and app/ruff.toml extend the
root configuration with the banned-api rule (TID251), and `ruff check .` (test.sh) applies each to its own
tree. These tests check that configuration on probe sources linted as if they were files there, and that
importing every module of core, and of evaluation, at run time loads none of its banned packages (an
import ruff cannot see, e.g. importlib's).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BANNED = {
    "core": ["gradio", "plotly", "app", "training", "evaluation"],
    "evaluation": ["gradio", "plotly", "app", "training"],
    "training": ["gradio", "plotly", "app"],
}


def banned_import_lines(path: str, source: str) -> list[int]:
    """The lines ruff reports as banned imports (TID251) in `source` linted as the file `path`, with the
    configuration ruff resolves for that path."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "json", "--stdin-filename", path, "-"],
        input=source, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: violations found
    return sorted(d["location"]["row"] for d in json.loads(done.stdout) if d["code"] == "TID251")


@pytest.mark.parametrize("path, module", [
    (f"{tree}/{where}probe.py", module)
    for tree, modules in BANNED.items() for module in modules for where in ("", "sub/")  # a subpackage too
])
def test_a_banned_import_is_a_lint_error(path, module):
    source = f"import {module}\n\n\ndef f():\n    from {module}.x import y\n\n    return {module}, y\n"
    assert banned_import_lines(path, source) == [1, 5]


@pytest.mark.parametrize("path", ["app/race/decode.py", "app/race/render.py", "app/drift/decode.py",
                                  "app/sweep/decode.py", "app/controls/run.py", "app/serving/registry.py",
                                  "app/widgets/probe.py", "app/probe.py"])
def test_what_decodes_renders_or_checks_in_the_app_imports_no_gradio(path):
    assert banned_import_lines(path, "import gradio as gr\n\nprint(gr)\n") == [1]


@pytest.mark.parametrize("path, module", [
    ("app/ui.py", "gradio"),  # the app's UI modules meet the browser
    ("app/race/tab.py", "gradio"),
    ("app/controls/panel.py", "gradio"),
    ("app/serving/runner.py", "gradio"),
    ("training/probe.py", "core.loading"),  # training builds on core
    ("training/probe.py", "evaluation.tasks"),  # and trains on evaluation's tasks
    ("evaluation/probe.py", "core.loading"),  # evaluation measures core
    ("evaluation/sub/probe.py", "evaluation.tasks"),
    ("app/probe.py", "training.train"),  # the boundaries are core's, evaluation's and training's own
    ("app/probe.py", "evaluation.bench"),
    ("core/probe.py", "core.loading"),
])
def test_an_allowed_import_is_not_banned(path, module):
    assert banned_import_lines(path, f"import {module}\n\nprint({module})\n") == []


@pytest.mark.parametrize("package", ["core", "evaluation"])
def test_importing_every_module_of_a_package_loads_none_of_its_banned_packages(package):
    check = f"""
import importlib, pkgutil, sys
import {package}
banned = {set(BANNED[package])!r}
for m in pkgutil.walk_packages({package}.__path__, "{package}."):
    if m.name == "{package}.__main__":
        continue
    try:
        importlib.import_module(m.name)
    except ModuleNotFoundError as e:  # an optional dependency (lm-eval) that is not installed
        if e.name.split(".")[0] in banned:
            raise
loaded = sorted(m for m in sys.modules if m.split(".")[0] in banned)
assert not loaded, loaded
"""
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_app_serving_imports_nothing_of_app_controls():
    """The controls check what a visitor asked for and hand it to serving to run: app/controls imports
    app/serving, never the other way round. Every import of every serving module, a function's own too,
    read from its source; then every one imported at run time, which loads no module of app/controls."""
    serving = sorted((ROOT / "app" / "serving").rglob("*.py"))
    assert serving
    for path in serving:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n == "app.controls" or n.startswith("app.controls.")], path
    check = """
import importlib, pkgutil, sys
import app.serving
for m in pkgutil.walk_packages(app.serving.__path__, "app.serving."):
    importlib.import_module(m.name)
loaded = sorted(m for m in sys.modules if m == "app.controls" or m.startswith("app.controls."))
assert not loaded, loaded
"""
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
