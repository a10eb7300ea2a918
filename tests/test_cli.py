"""python -m core.generate on a small saved model."""

import subprocess
import sys

import pytest
from conftest import tiny_model

from core.checkpoint import save_own_model
from core.task import ITEMS, NAMES, NUMBERS, WORDS
from core.word_tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    tok = build_tokenizer(NAMES + ITEMS + NUMBERS + WORDS)
    save_own_model(
        tiny_model(vocab_size=len(tok), mask_token_id=tok.mask_token_id),
        tok,
        folder,
        decode_defaults={"gen_len": 16, "block_len": 8},
    )
    return folder


def cli(*args):
    return subprocess.run([sys.executable, "-m", "core.generate", *args], capture_output=True, text=True, timeout=120)


def test_cli_prints_answer_and_summary(model_dir):
    out = cli(
        "--model",
        str(model_dir),
        "--prompt",
        "mia has 3 apples . how many apples does mia have now ?",
        "--policy",
        "entropy",
        "--tau",
        "0.5",
        "-k",
        "2",
    )
    assert out.returncode == 0, out.stderr
    summary = out.stderr.strip().splitlines()[-1]
    assert summary.startswith("[entropy(tau=0.5, k=2)] steps ")
    assert "full steps" in summary and "rows computed" in summary and "tokens/s" in summary


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", "   "], "error: the prompt is empty"),
        (["--prompt", "mia", "--gen-len", "20"], "error: gen_len 20 is not a multiple of block_len 8"),
        (["--prompt", "mia", "--tau", "nan"], "error: tau must be a number"),
        (["--prompt", "mia", "--steps", "1000"], "error: steps must be an integer in [2, 16]"),
        (["--prompt", "mia", "--gen-len", "0"], "error: gen_len must be an integer in [1, 8192]"),
        (["--prompt", "mia", "--device", "tpu9"], "error: unknown device 'tpu9'"),
    ],
)
def test_cli_bad_input(model_dir, args, message):
    out = cli("--model", str(model_dir), *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_checks_decode_flags_before_loading(tmp_path):
    out = cli("--model", str(tmp_path / "no-such-model"), "--prompt", "mia", "--gen-len", "20", "--block", "8")
    assert out.returncode == 2 and "gen_len 20 is not a multiple of block_len 8" in out.stderr


def test_cli_unknown_policy_is_rejected(model_dir):
    out = cli("--model", str(model_dir), "--prompt", "mia", "--policy", "magic")
    assert out.returncode == 2 and "invalid choice: 'magic'" in out.stderr


def test_cli_loads_once_without_a_runpy_warning():
    """`-m core.generate` must not find the module already imported by the package (runpy then
    warns and the module's code runs twice)."""
    out = cli("--help")
    assert out.returncode == 0 and "--prompt" in out.stdout
    assert out.stderr == ""
