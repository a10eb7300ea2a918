"""The command lines, `python -m evaluation generate|bench|lm-eval|lm-eval-task` and `python -m training`, on a small
saved model: one test per command here (bench: tests/evaluation/test_bench.py, training:
tests/training/test_train.py), and the shared flags."""

import json
import os
import subprocess
import sys

import pytest
from command_line import run_cli
from tiny_models import save_word_problems_model

PROMPT = "mia has 3 apples . how many apples does mia have now ?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_word_problems_model(tmp_path_factory.mktemp("own"), gen_len=16, block_len=8)


def cli(*args, module: str = "evaluation"):
    return run_cli(module, *args)


def python_m(module: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m module args` itself, in a process of its own."""
    env = {**os.environ, "COLUMNS": "300"}  # help text on one line per flag
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120, env=env)


def test_generate_prints_answer_and_summary(model_dir):
    out = cli("generate", "--model", str(model_dir), "--prompt", PROMPT, "--policy", "entropy", "--tau", "0.5",
              "-k", "2")
    assert out.returncode == 0, out.stderr
    summary = out.stderr.strip().splitlines()[-1]
    assert summary.startswith("[entropy(tau=0.5, k=2)] steps 16, ")  # the model's own gen_len: 16 steps
    assert "full steps" in summary and "rows computed" in summary and "tokens/s" in summary


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", "   "], "error: the prompt is empty"),
        (["--prompt", "mia", "--gen-len", "20"], "error: gen_len 20 is not a multiple of block_len 8"),
        (["--prompt", "mia", "--tau", "nan"], "error: tau must be a number"),
        (["--prompt", "mia", "--k", "-1"], "error: k must be a non-negative integer, got -1"),
        (["--prompt", "mia", "--policy", "none", "--tau", "0.3"], "--tau is a parameter of entropy, not of none"),
        (["--prompt", "mia", "--steps", "1000"], "error: steps must be an integer in [2, 16]"),
        (["--prompt", "mia", "--gen-len", "0"], "error: gen_len must be an integer in [1, 8192]"),
        (["--prompt", "mia", "--device", "tpu9"], "error: unknown device 'tpu9'"),
        (["--prompt", "mia \udcff has"], "error: the prompt has a lone surrogate (U+DCFF) at character 5"),  # bytes
        (["--prompt", "hello, write a poem"], "error: the model does not know 5 words of the prompt: 'hello', ','"),
    ],
)
def test_generate_bad_input(model_dir, args, message):
    out = cli("generate", "--model", str(model_dir), *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_an_output_folder_or_a_cache_length_that_cannot_be_is_refused(model_dir, tmp_path, capsys, monkeypatch):
    """In-process (main): each is refused by name before anything is written or loaded."""
    from evaluation.cli import main

    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    positions = json.loads((model_dir / "config.json").read_text())["max_seq_len"]
    for argv, message in (
        (["lm-eval-task", "--out", ""], "--out '': name a folder"),  # not the working folder
        (["lm-eval-task", "--out", "file"], f"--out 'file': {tmp_path / 'file'} is a file, not a folder"),
        (["bench", "--model", str(model_dir), "--forward-rows", "2", "--length", str(positions + 1)],
         f"--length {positions + 1} exceeds the model's {positions} positions"),
    ):
        assert main(argv) == 2 and f"error: {message}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_unknown_words_are_named_with_what_the_model_reads(model_dir):
    out = cli("generate", "--model", str(model_dir), "--prompt", "What is 12 plus 7?")
    assert out.returncode == 2 and "'What', 'plus'" in out.stderr
    assert "trained only on word problems" in out.stderr and "python -m evaluation generate --prompt" in out.stderr


def test_generate_checks_decode_flags_before_loading(tmp_path):
    out = cli("generate", "--model", str(tmp_path / "no-such-model"), "--prompt", "mia", "--gen-len", "20",
              "--block", "8")
    assert out.returncode == 2 and "gen_len 20 is not a multiple of block_len 8" in out.stderr


def test_unknown_policy_and_command_are_rejected(model_dir):
    out = cli("generate", "--model", str(model_dir), "--prompt", "mia", "--policy", "magic")
    assert out.returncode == 2 and "invalid choice: 'magic'" in out.stderr
    out = cli("decode", "--prompt", "mia")
    assert out.returncode == 2 and "invalid choice: 'decode'" in out.stderr


def test_every_policy_parameter_has_its_flag():
    """Flags come from the policies' declarations: each declared parameter has one, with its default."""
    from core.params import value_text
    from core.policies import POLICIES

    out = cli("generate", "--help")
    assert out.returncode == 0 and out.stderr == ""
    for cls in POLICIES.values():
        for p in cls.parameters:
            assert f"--{p.name.replace('_', '-')}" in out.stdout and f"default {value_text(p.default)}" in out.stdout


def test_every_decode_setting_has_its_flag():
    """Decode flags come from the decode settings' declarations (DecodeConfig.parameters), with their help."""
    from core.config import DecodeConfig
    from evaluation.cli.flags import FLAGS

    out = cli("generate", "--help")
    assert out.returncode == 0 and out.stderr == ""
    for p in DecodeConfig.parameters:
        flag = FLAGS.get(p.name, f"--{p.name.replace('_', '-')}")
        metavar = "{" + ",".join(p.choices) + "}" if p.choices else p.name.upper()  # a name's flag lists them
        assert f"{flag} {metavar}" in out.stdout and p.help.split(";")[0] in out.stdout


def test_every_command_is_behind_the_one_entry_point():
    out = python_m("evaluation", "--help")
    assert out.returncode == 0 and out.stderr == "" and "{generate,bench,lm-eval,lm-eval-task}" in out.stdout
    for command in ("generate", "bench", "lm-eval", "lm-eval-task"):
        out = cli(command, "--help")
        assert out.returncode == 0 and out.stderr == "" and f"python -m evaluation {command}" in out.stdout
    out = python_m("training", "--help")
    assert out.returncode == 0 and out.stderr == "" and "{train,recipe}" in out.stdout
    for command in ("train", "recipe"):
        out = cli(command, "--help", module="training")
        assert out.returncode == 0 and out.stderr == "" and f"python -m training {command}" in out.stdout


def test_the_package_function_generate_is_not_shadowed():
    """`core.generate` is the function even after the command line is imported."""
    code = "import core, evaluation.cli, evaluation.bench, training.train; assert callable(core.generate); print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_forward_rows_prints_each_pass_against_the_weight_read_floor_eager_beside_compiled(model_dir, capsys,
                                                                                           monkeypatch):
    """Each row count's time, share of the slowest and ratio to the floor (weights over the copy
    bandwidth), per path: eager, the fast path, and every pass a compiled graph with the few-row
    kernel's products and with ATen's: the costs and the bandwidth are set here, so the arithmetic is
    checked."""
    from types import SimpleNamespace

    from core.loading import load_model
    from evaluation.cli import forward_rows
    from evaluation.forward_cost import weight_bytes

    model, _ = load_model(model_dir)
    # eager, the fast path, compiled graphs with the kernel's products and with ATen's
    paths = iter([{10: 0.004, 2: 0.001}, {10: 0.002, 2: 0.0004}, {10: 0.002, 2: 0.0006}, {10: 0.003, 2: 0.0008}])
    monkeypatch.setattr(forward_rows, "forward_costs", lambda model, length, counts: next(paths))
    monkeypatch.setattr(forward_rows, "copy_bandwidth", lambda device: weight_bytes(model) / 0.0002)  # floor 0.2 ms
    monkeypatch.setattr(forward_rows, "compiles", lambda mode, model: True)
    monkeypatch.setattr(forward_rows, "set_compile", lambda model, mode: None)
    monkeypatch.setattr(forward_rows, "compile_state", lambda model: "compiled")
    swaps = []
    monkeypatch.setattr(forward_rows, "few_rows", SimpleNamespace(
        attached=lambda model: True, few_rows_state=lambda model: "few-row kernel (as said)",
        detach=lambda model: swaps.append("detach"), attach=lambda model: swaps.append("attach")))
    from evaluation.forward_cost import pass_flops

    rate = pass_flops(model.config, 2, 10, 1) / 0.0001  # 2 rows' arithmetic: 0.1 ms
    monkeypatch.setattr(forward_rows, "gemm_rate", lambda model, length: rate)
    arith_10 = pass_flops(model.config, 10, 10, 1) / rate
    forward_rows.print_forward_costs(model, 10, [10, 2], "auto")
    lines = capsys.readouterr().out.splitlines()
    assert swaps == ["detach", "attach"]  # ATen's products measured, then the kernel's again
    assert lines[0] == "fast path: passes compiled, over few rows few-row kernel (as said)"
    assert "so reading them once (the floor) takes 0.200 ms" in lines[1]
    assert lines[2].startswith(f"the widest product of a full pass runs at {rate / 1e9:.0f} GFLOP/s now")
    assert lines[3] == ("rows of 10 | arith ms | eager ms | share | / floor | / arith"
                        " | fast path ms | share | / floor | / arith | compiled graphs ms | share | / floor | / arith"
                        " | compiled, ATen products ms | share | / floor | / arith")
    assert lines[4] == (f"   10 | {arith_10 * 1e3:8.3f} |    4.000 | 1.000 |  20.00x | {0.004 / arith_10:6.2f}x"
                        f" |    2.000 | 1.000 |  10.00x | {0.002 / arith_10:6.2f}x"
                        f" |    2.000 | 1.000 |  10.00x | {0.002 / arith_10:6.2f}x"
                        f" |    3.000 | 1.000 |  15.00x | {0.003 / arith_10:6.2f}x")
    assert lines[5] == ("    2 |    0.100 |    1.000 | 0.250 |   5.00x |  10.00x |    0.400 | 0.200 |   2.00x |   4.00x"
                        " |    0.600 | 0.300 |   3.00x |   6.00x |    0.800 | 0.267 |   4.00x |   8.00x")
