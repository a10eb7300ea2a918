"""The benchmark harness: its rows, its reference semantics and its command line."""

import json
import math
import subprocess
import sys

import pytest
from conftest import tiny_model

from core.bench import Contender, contenders_from, run_bench
from core.checkpoint import save_own_model
from core.decoder import DecodeConfig, generate
from core.loading import chat_prompt_ids, load_model
from core.policies import make_policy
from core.tasks.word_problems import ITEMS, NAMES, NUMBERS, WORDS, make_split
from core.word_tokenizer import build_tokenizer

FIELDS = {
    "policy",
    "params",
    "n",
    "accuracy",
    "agreement",
    "speedup",
    "rows_fraction",
    "full_steps_fraction",
    "decision_overhead",
    "tokens_per_s",
    "ceiling",
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    tok = build_tokenizer(NAMES + ITEMS + NUMBERS + WORDS)
    save_own_model(tiny_model(vocab_size=len(tok), mask_token_id=tok.mask_token_id), tok, folder)
    return folder


def test_rows_and_reference_semantics(saved):
    model, tok = load_model(saved)
    problems = make_split("test", 3)
    contenders = [Contender("none", {}), Contender("entropy", {"tau": -math.inf, "k": 2}), Contender("dual", {})]
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    rows = run_bench(model, tok, problems, contenders, config, warmup=0, progress=False)
    assert [r["policy"] for r in rows] == ["none", "entropy", "dual"]
    for r in rows:
        assert FIELDS <= set(r) and r["n"] == 3
        assert 0 < r["decision_overhead"] < 1 and r["tokens_per_s"] > 0
    none, always_full, dual = rows
    assert none["speedup"] == 1.0 and none["agreement"] == 1.0 and none["ceiling"] == 1.0
    assert always_full["agreement"] == 1.0 and always_full["rows_fraction"] == 1.0
    assert always_full["full_steps_fraction"] == 1.0 and always_full["accuracy"] == none["accuracy"]
    assert dual["full_steps_fraction"] == 2 / 16  # one full step per block, 2 blocks, 16 steps per prompt
    # agreement: the fraction of response tokens equal to the reference's, over all problems
    same = 0
    for p in problems:
        ids = chat_prompt_ids(tok, p.prompt)
        a = generate(model, ids, make_policy("none"), config).tokens
        b = generate(model, ids, make_policy("dual"), config).tokens
        same += sum(x == y for x, y in zip(a, b))
    assert dual["agreement"] == same / (16 * 3)


def test_tau_list_makes_a_sweep():
    cs = contenders_from(["none", "entropy"], {"tau": [0.1, 1.0], "k": [3]})
    assert [(c.policy, c.params) for c in cs] == [
        ("none", {}),
        ("entropy", {"tau": 0.1, "k": 3}),
        ("entropy", {"tau": 1.0, "k": 3}),
    ]
    with pytest.raises(ValueError, match="unknown policy 'fast'"):
        contenders_from(["none", "fast"], {"tau": [0.1]})


def bench_cli(*args):
    return subprocess.run([sys.executable, "-m", "core", "bench", *args], capture_output=True, text=True, timeout=300)


def test_cli_writes_table_and_json(saved, tmp_path):
    out = tmp_path / "rows.json"
    res = bench_cli(
        "--model",
        str(saved),
        "--policies",
        "none,entropy",
        "--tau",
        "0.5,2",
        "--n",
        "2",
        "--gen-len",
        "16",
        "--block",
        "8",
        "--json",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert [r["label"] for r in rows] == ["none", "entropy(tau=0.5, k=2)", "entropy(tau=2.0, k=2)"]
    assert all(FIELDS <= set(r) for r in rows)
    assert "entropy(tau=2.0, k=2)" in res.stdout and "speedup" in res.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--n", "0"], "--n must be in [1, 1000]"),
        (["--policies", "none,magic"], "unknown policy 'magic'"),
        (["--gen-len", "20", "--block", "8"], "not a multiple of block_len"),
        (["--tau", "nan"], "tau must be a number"),
        (["--tau", "0.1,x"], "--tau must be a comma list of numbers, got '0.1,x'"),
        (["--k", "1.5"], "k must be a non-negative integer, got 1.5"),
        (["--policies", "none,dual", "--tau", "0.3"], "--tau is a parameter of entropy, not of none, dual"),
        (["--drift", "--policies", "none,entropy"], "--drift probes one policy"),
    ],
)
def test_cli_bad_input(saved, args, message):
    res = bench_cli("--model", str(saved), *args)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gen-len", "20", "--block", "8"], "not a multiple of block_len"),
        (["--block", "0"], "block_len must be a positive integer, got 0"),
        (["--gen-len", "9000"], "gen_len must be an integer in [1, 8192]"),
        (["--threshold", "2"], "threshold must be a number in (0, 1]"),
        (["--forward-rows", "108,0"], "--forward-rows counts must be at least 1, got 0"),
        (["--forward-rows", "18,x"], "--forward-rows must be a comma list of integers, got '18,x'"),
        (["--forward-rows", "18", "--length", "0"], "--length must be a positive integer, got 0"),
    ],
)
def test_cli_checks_decode_flags_before_loading(tmp_path, args, message):
    """A wrong flag is reported at once, not after a (possibly minutes-long) model load."""
    res = bench_cli("--model", str(tmp_path / "no-such-model"), *args)
    assert res.returncode == 2 and message in res.stderr and "no-such-model" not in res.stderr


def test_forward_costs_cover_each_row_count(saved):
    from core.forward_cost import forward_costs

    model, _ = load_model(saved)
    costs = forward_costs(model, 24, [24, 6, 1], repeats=2)
    assert list(costs) == [24, 6, 1] and all(s > 0 for s in costs.values())


def test_weight_bytes_count_what_every_pass_reads(saved):
    from core.forward_cost import weight_bytes

    model, _ = load_model(saved)
    everything = sum(p.numel() * p.element_size() for p in model.parameters())
    table = model.embed.weight.numel() * model.embed.weight.element_size()
    assert model.lm_head.weight is not model.embed.weight
    assert weight_bytes(model) == everything - table
    model.lm_head.weight = model.embed.weight  # tied: the head reads the whole table every pass
    assert weight_bytes(model) == sum(p.numel() * p.element_size() for p in model.parameters())


def test_drift_report_pools_problems(saved):
    from core.diagnostics import drift_report

    model, tok = load_model(saved)
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    prompts = [p.prompt for p in make_split("test", 2)]
    report = drift_report(model, tok, prompts, "entropy", {"tau": 0.5, "k": 2}, config)
    assert report["n_pairs"] == 2 * 15  # every step but the first of each problem
    for key in ("pearson_cos", "spearman_cos", "pearson_l2", "spearman_l2"):
        assert -1.0 <= report[key] <= 1.0
    assert min(report["volatility"]) == 1


def test_sweep_points_equal_bench_rows_for_the_same_settings(saved):
    from core.bench import sweep, sweep_progress

    model, tok = load_model(saved)
    problems = make_split("test", 2)
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    points = sweep(model, tok, problems, [0.1, 2.0], [1, 2], config)
    assert [p["label"] for p in points] == ["none"] + [
        f"entropy(tau={t}, k={k})" for t in (0.1, 2.0) for k in (1, 2)]
    direct = run_bench(model, tok, problems, [Contender("none", {}), Contender("entropy", {"tau": 2.0, "k": 1})],
                       config, warmup=0, progress=False)
    exact = ("accuracy", "agreement", "rows_fraction", "full_steps_fraction", "steps")
    assert {k: points[3][k] for k in exact} == {k: direct[1][k] for k in exact}
    # Followed decode by decode (1 warm-up + 2 problems, 5 contenders each): rows appear as problems
    # finish, each counting its problems, and the last rows are the sweep's.
    followed = list(sweep_progress(model, tok, problems, [0.1, 2.0], [1, 2], config))
    assert [p.decodes for p in followed] == list(range(1, 16)) and {p.total for p in followed} == {15}
    assert [p.problems for p in followed] == [0] * 9 + [1] * 5 + [2]
    assert followed[8].rows == [] and [r["n"] for r in followed[9].rows] == [1] * 5
    assert [{k: r[k] for k in exact} for r in followed[-1].rows] == [{k: r[k] for k in exact} for r in points]
    with pytest.raises(ValueError, match="tau must be a number"):
        sweep(model, tok, problems, [float("nan")], [1], config)
