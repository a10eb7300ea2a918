"""The benchmark harness: its rows, its reference semantics and its command line."""

import json
import math

import pytest
from command_line import run_cli
from tiny_models import save_word_problems_model, tiny_model

from core.config import DecodeConfig
from core.decoder import decode, generate
from core.loading import answer_text, chat_prompt_ids, load_model
from core.policies import make_policy
from evaluation.bench import Contender, bench_progress, bench_rows, contenders_from, format_table
from evaluation.tasks import held_out, is_correct, own_items
from evaluation.tasks.word_problems import make_split

FIELDS = {
    "policy",
    "params",
    "n",
    "accuracy",
    "agreement",
    "agreement_in_text",
    "speedup",
    "rows_fraction",
    "full_steps_fraction",
    "decision_overhead",
    "tokens_per_s",
    "ceiling",
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_word_problems_model(tmp_path_factory.mktemp("own"))


def test_rows_and_reference_semantics(saved):
    model, tok = load_model(saved)
    problems = held_out("words", 3)
    contenders = [Contender("none", {}), Contender("entropy", {"tau": -math.inf, "k": 2}), Contender("dual", {})]
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    rows = bench_rows(bench_progress(model, tok, problems, contenders, config, warmup=0), bar=False)
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


@pytest.mark.parametrize(
    "policies, values, expected",
    [
        (["none", "entropy"], {"tau": [0.1, 1.0], "k": [3]},
         [("none", {}), ("entropy", {"tau": 0.1, "k": 3}), ("entropy", {"tau": 1.0, "k": 3})]),
        (["none", "entropy", "dllm-cache"], {"tau": [0.1, 1.0], "k": [3], "response_every": [2, 4]},
         [("none", {}), ("entropy", {"tau": 0.1, "k": 3}), ("entropy", {"tau": 1.0, "k": 3}),
          ("dllm-cache", {"response_every": 2}), ("dllm-cache", {"response_every": 4})]),
    ],
    ids=["tau-list", "several-policies"],
)
def test_contenders_cover_every_combination_of_listed_values(policies, values, expected):
    assert [(c.policy, c.params) for c in contenders_from(policies, values)] == expected


@pytest.mark.parametrize(
    "policies, values, message",
    [
        (["none", "fast"], {"tau": [0.1]}, "unknown policy 'fast'"),
        (["none", "fast"], {}, "unknown policy 'fast'"),
        (["dllm-cache"], {"prompt_every": [0]}, "prompt_every must be a positive integer, got 0"),
    ],
)
def test_contenders_refuse_unknown_policies_and_bad_values(policies, values, message):
    with pytest.raises(ValueError, match=message):
        contenders_from(policies, values)


def bench_cli(*args):
    return run_cli("evaluation", "bench", *args)


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
        "--graphs",
        "on",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert [r["label"] for r in rows] == ["none", "entropy(tau=0.5, k=2)", "entropy(tau=2.0, k=2)"]
    assert all(FIELDS <= set(r) for r in rows)
    assert all(r["capture_s"] == 0 for r in rows)  # the static path, run eagerly: nothing to capture on a CPU
    assert "entropy(tau=2.0, k=2)" in res.stdout and "speedup" in res.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--n", "0"], "--n must be in [1, 1000]"),
        (["--policies", "none,magic"], "unknown policy 'magic'"),
        (["--tau", "nan"], "tau must be a number"),
        (["--tau", "0.1,x"], "--tau must be a comma list of numbers, got '0.1,x'"),
        (["--tau", ","], "--tau must be a comma list of numbers, got none in ','"),  # not a bench without entropy
        (["--warmup", "-1"], "--warmup must be a non-negative integer, got -1"),
        (["--json", "/"], "--json '/': / is a folder, not a file"),  # told now, not after the bench
        (["--json", "/proc/version/rows.json"], "--json '/proc/version/rows.json': /proc/version is a file"),
        (["--shots", ""], "--shots must be a non-negative integer or a comma list of them, got ''"),  # not unset
        (["--forward-rows", ""], "--forward-rows must be a positive integer or a comma list of them, got ''"),
        (["--length", "50"], "--length is the cache length of --forward-rows: pass it with --forward-rows"),
        (["--k", "1.5"], "k must be a non-negative integer, got 1.5"),
        (["--policies", "none,dual", "--tau", "0.3"], "--tau is a parameter of entropy, not of none, dual"),
        (["--drift", "--policies", "none,entropy"], "--drift probes one policy"),
        (["--gen-len", "20", "--block", "8"], "not a multiple of block_len"),
        (["--block", "0"], "block_len must be a positive integer, got 0"),
        (["--gen-len", "9000"], "gen_len must be an integer in [1, 8192]"),
        (["--threshold", "2"], "threshold must be a number in (0, 1]"),
        (["--graphs", "yes"], "argument --graphs: invalid choice: 'yes'"),
        (["--forward-rows", "108,0"], "--forward-rows must be a positive integer, got 0"),
        (["--forward-rows", "18,x"], "--forward-rows must be a positive integer or a comma list of them, got '18,x'"),
        (["--forward-rows", "18", "--length", "0"], "--length must be a positive integer, got 0"),
    ],
)
def test_cli_checks_flags_before_loading(tmp_path, args, message):
    """A wrong flag is reported at once, in its own words, not after a (possibly minutes-long) model load."""
    res = bench_cli("--model", str(tmp_path / "no-such-model"), *args)
    assert res.returncode == 2 and message in res.stderr
    assert "no-such-model" not in res.stderr and "Traceback" not in res.stderr


def test_forward_costs_cover_each_row_count(saved):
    from evaluation.forward_cost import forward_costs

    model, _ = load_model(saved)
    costs = forward_costs(model, 24, [24, 6, 1], repeats=2)
    assert list(costs) == [24, 6, 1] and all(s > 0 for s in costs.values())


def test_pass_flops_are_what_torchs_flop_counter_counts(family):
    """Every matmul of a pass, attention's included (run on its math backend, where torch counts them),
    and the LM head over the logit rows only: the count the GPU check turns into TFLOPS."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from evaluation.forward_cost import pass_flops

    model = tiny_model(family)
    cache = model.new_cache(1, 20)
    ids = torch.randint(0, 40, (1, 20))
    with torch.no_grad():
        model(ids, cache)
        for rows, logit_rows in ((None, None), (torch.arange(12, 20), torch.arange(16, 20))):
            with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counted:
                model(ids if rows is None else ids[:, rows], cache, rows, logit_rows)
            n, n_logits = (20, 20) if rows is None else (8, 4)
            assert counted.get_total_flops() == pass_flops(model.config, n, 20, n_logits)
    llada = dict(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, ffn_dim=12288, mask_token_id=126336)
    from core.config import ModelConfig

    assert round(pass_flops(ModelConfig(**llada), 1256, 1256, 32) / 1e12, 1) == 18.4  # as its docstring says


def test_weight_bytes_count_what_every_pass_reads(saved):
    from evaluation.forward_cost import weight_bytes

    model, _ = load_model(saved)
    everything = sum(p.numel() * p.element_size() for p in model.parameters())
    table = model.embed.weight.numel() * model.embed.weight.element_size()
    assert model.lm_head.weight is not model.embed.weight
    assert weight_bytes(model) == everything - table
    model.lm_head.weight = model.embed.weight  # tied: the head reads the whole table every pass
    assert weight_bytes(model) == sum(p.numel() * p.element_size() for p in model.parameters())


def test_drift_report_pools_problems(saved):
    from evaluation.diagnostics import drift_report, format_drift

    model, tok = load_model(saved)
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    prompts = [p.prompt for p in make_split("test", 2)]
    report = drift_report(model, tok, prompts, "entropy", {"tau": 0.5, "k": 2}, config)
    assert report["n_pairs"] == 2 * 15  # every step but the first of each problem
    assert report["marked"]["block_start"] == 2  # one block start after the first, per problem
    links = report["links"]
    assert links["change_all"]["n"] == 30 and links["change_unmarked"]["n"] == 30 - sum(report["marked"].values())
    for link in links.values():
        assert math.isnan(link["spearman"]) or -1.0 <= link["spearman"] <= 1.0
    assert min(report["volatility"]) == 1 and min(report["staleness"]) >= 1
    assert report["summary"].startswith("Here the entropy of what a step decodes")
    text = format_drift(report)
    assert "30 step pairs" in text and "rows reused" in text and report["summary"] in text


def test_sweep_points_equal_bench_rows_for_the_same_settings(saved):
    from evaluation.bench import sweep_progress

    def sweep(*args):  # a sweep followed to the end: its rows
        return bench_rows(sweep_progress(*args), bar=False)

    model, tok = load_model(saved)
    problems = held_out("words", 2)
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    points = sweep(model, tok, problems, [0.1, 2.0], [1, 2], config)
    assert [p["label"] for p in points] == ["none"] + [
        f"entropy(tau={t}, k={k})" for t in (0.1, 2.0) for k in (1, 2)]
    contenders = [Contender("none", {}), Contender("entropy", {"tau": 2.0, "k": 1})]
    direct = bench_rows(bench_progress(model, tok, problems, contenders, config, warmup=0), bar=False)
    exact = ("accuracy", "agreement", "rows_fraction", "full_steps_fraction", "steps")
    assert {k: points[3][k] for k in exact} == {k: direct[1][k] for k in exact}
    # Followed decode by decode (1 warm-up + 2 problems, 5 contenders each): rows appear as problems
    # finish, each counting its problems, and the last rows are the sweep's.
    followed = list(sweep_progress(model, tok, problems, [0.1, 2.0], [1, 2], config))
    assert [p.decodes for p in followed] == list(range(1, 16)) and {p.total for p in followed} == {15}
    assert {p.warmup for p in followed} == {5}  # the warm-up's decodes, one per contender, said as such
    assert [p.problems for p in followed] == [0] * 9 + [1] * 5 + [2]
    assert followed[8].rows == [] and [r["n"] for r in followed[9].rows] == [1] * 5
    assert [{k: r[k] for k in exact} for r in followed[-1].rows] == [{k: r[k] for k in exact} for r in points]
    with pytest.raises(ValueError, match="tau must be a number"):
        sweep(model, tok, problems, [float("nan")], [1], config)


def test_every_row_keeps_what_each_prompt_decoded_and_its_measures(saved):
    """per_prompt: the answer (text, tokens before the end-of-text), its grade, agreement and first divergence
    against the reference, and the full steps split as the row's fractions split them."""
    from evaluation.bench import first_divergence, matched_positions

    assert first_divergence([1, 2, 3], [1, 2, 3]) == 3 and first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2 and first_divergence([1, 2], [1, 2, 3]) == 2
    assert matched_positions([1, 2, 3], [1, 5, 3, 4]) == 2 and matched_positions([1, 2, 3], [1]) == 1
    model, tok = load_model(saved)
    problems = held_out("words", 3)
    config = DecodeConfig(gen_len=16, block_len=8)
    contenders = [Contender("none", {}), Contender("entropy", {"tau": 12.0, "k": 1})]
    none, cached = bench_rows(bench_progress(model, tok, problems, contenders, config, warmup=0), bar=False)
    for row in (none, cached):
        assert [p["prompt"] for p in row["per_prompt"]] == [item.prompt for item in problems]
        for item, p in zip(problems, row["per_prompt"]):
            last = generate(model, chat_prompt_ids(tok, item.prompt), make_policy(row["policy"], **row["params"]),
                            config)
            assert p["tokens"] == last.tokens[: last.totals.tokens] and p["text"] == answer_text(tok, last)
            assert p["correct"] == is_correct(item, p["text"]) and p["steps"] == last.totals.steps
        assert row["accuracy"] == sum(p["correct"] for p in row["per_prompt"]) / 3
        steps = sum(p["steps"] for p in row["per_prompt"])
        assert row["full_steps_forced"] == sum(len(p["full_steps_forced_at"]) for p in row["per_prompt"]) / steps
        by_entropy = sum(len(p["full_steps_entropy_at"]) for p in row["per_prompt"]) / steps
        assert row["full_steps_entropy"] == (by_entropy if row["policy"] == "entropy" else None)
    refs = none["per_prompt"]
    assert all(p["identical"] and p["first_divergence"] == len(p["tokens"]) for p in refs)
    for p, ref in zip(cached["per_prompt"], refs):
        assert p["first_divergence"] == first_divergence(ref["tokens"], p["tokens"])
        assert p["identical"] == (p["tokens"] == ref["tokens"]) and 0 <= p["agreement"] <= 1
        same = sum(a == b for a, b in zip(ref["tokens"], p["tokens"]))
        assert p["agreement_in_text"] == (same / len(ref["tokens"]) if ref["tokens"] else None)
    texts = [len(ref["tokens"]) for ref in refs]
    matched = [round(p["agreement_in_text"] * n) for p, n in zip(cached["per_prompt"], texts) if n]
    assert cached["agreement_in_text"] == sum(matched) / sum(texts) and none["agreement_in_text"] == 1.0
    assert cached["first_divergence_median"] == sorted(p["first_divergence"] for p in cached["per_prompt"])[1]


def test_cli_bench_decodes_your_prompts_file_one_prompt_a_line(saved, tmp_path):
    lines = [p.prompt for p in make_split("test", 2)]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"{lines[0]}\n\n  {lines[1]}  \n")
    out = tmp_path / "rows.json"
    res = bench_cli("--model", str(saved), "--prompts", str(prompts), "--policies", "none,entropy", "--tau", "0.5",
                    "--gen-len", "16", "--block", "8", "--json", str(out))
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert [r["accuracy"] for r in rows] == [None, None] and "shots" not in rows[0]  # no known answers
    assert [p["prompt"] for p in rows[1]["per_prompt"]] == lines and rows[1]["n"] == 2
    model, tok = load_model(saved)
    contenders = [Contender("none", {}), Contender("entropy", {"tau": 0.5})]
    direct = bench_rows(bench_progress(model, tok, own_items(lines), contenders, DecodeConfig(gen_len=16, block_len=8)),
                        bar=False)
    assert [r["per_prompt"] for r in rows] == [r["per_prompt"] for r in direct]
    header, _, *table, load = res.stdout.splitlines()
    assert "1st div" in header and all(line.split("|")[1].strip() == "-" for line in table)  # acc: none
    assert load.startswith("other processes kept ") and "cores busy on average while this ran" in load


@pytest.mark.parametrize(
    "lines, args, message",
    [
        (None, [], "--prompts: cannot read"),
        (["", "  "], [], "has no prompt (one prompt a line)"),
        (["mia has 7 marbles .", "", "tell a story about mia ."], [],
         "--prompts line 3: the model does not know 4 words of the prompt: 'tell', 'a', 'story', 'about'"),
        (["mia has 7 marbles .", "mia " * 30], ["--gen-len", "1000", "--block", "8"],
         "--prompts line 2: the prompt ("),
        (["mia has 7 marbles ."], ["--n", "3", "--shots", "2"],
         "--prompts decodes the file's prompts: leave out --n, --shots"),
        (["mia has 7 marbles ."], ["--task", "stories"], "leave out --task"),
    ],
)
def test_cli_names_the_bad_line_of_a_prompts_file_before_the_weights_load(tmp_path, capsys, lines, args, message):
    """A tokenizer of the word problems' words alone, and no weights at all: the file's error comes first."""
    from tiny_models import word_problems_tokenizer

    from core.loading import EMBEDDED
    from evaluation.cli import main

    (tmp_path / "config.json").write_bytes((EMBEDDED / "config.json").read_bytes())
    word_problems_tokenizer().save_pretrained(tmp_path)
    prompts = tmp_path / "prompts.txt"
    if lines is not None:
        prompts.write_text("\n".join(lines) + "\n")
    assert main(["bench", "--model", str(tmp_path), "--prompts", str(prompts), *args]) == 2
    assert message in capsys.readouterr().err


def test_task_items_few_shot_prompts_and_grading():
    from evaluation.tasks import held_out, is_correct
    from evaluation.tasks.stories import make_split as stories_split
    from evaluation.tasks.word_problems import make_split as words_split

    plain = held_out("words", 3)
    assert [i.prompt for i in plain] == [p.prompt for p in words_split("test", 3)]
    shot = held_out("words", 3, shots=4)
    examples = words_split("shots", 12)
    for i, item in enumerate(shot):
        assert item.prompt.count("question :") == 5 and item.prompt.endswith("question : " + plain[i].prompt)
        for ex in examples[4 * i : 4 * i + 4]:  # every item its own worked examples, answers included
            assert f"question : {ex.prompt} answer : {ex.answer_text}" in item.prompt
    assert [i.task for i in held_out("mix", 5)] == ["words", "stories", "words", "stories", "words"]
    story = stories_split("test", 1)[0]
    item = held_out("stories", 1)[0]
    assert item.prompt == story.prompt and is_correct(item, story.answer_text)
    assert not is_correct(item, story.answer_text.replace(" the end .", ""))
    assert is_correct(plain[0], words_split("test", 1)[0].answer_text) and not is_correct(plain[0], "the answer is")
    with pytest.raises(ValueError, match="shots must be a non-negative integer, got -1"):
        held_out("words", 2, shots=-1)
    with pytest.raises(ValueError, match="unknown task 'poems'"):
        held_out("poems", 2)


def test_entropy_columns_and_the_split_of_full_steps(saved):
    """Per-step max entropies summarised per contender; full steps split into forced (a block's first
    step) and the rest, checked against the events themselves."""
    from core.policies import make_policy as policy

    model, tok = load_model(saved)
    items = held_out("words", 2)
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    contenders = [Contender("none", {}), Contender("entropy", {"tau": math.inf, "k": 2}),
                  Contender("entropy", {"tau": 0.0, "k": 2})]
    none, never, always = bench_rows(bench_progress(model, tok, items, contenders, config, warmup=0), bar=False)
    assert none["full_steps_forced"] == never["full_steps_forced"] == 2 / 16  # two blocks, 16 steps
    assert none["full_steps_entropy"] is None and never["full_steps_entropy"] == 0.0  # none: no entropy to decide by
    assert never["full_steps_fraction"] == 2 / 16
    maxes = sorted(e.max_entropy for item in items
                   for e in decode(model, chat_prompt_ids(tok, item.prompt), policy("none"), config))
    assert none["entropy_max"] == maxes[-1] and none["entropy_p50"] == pytest.approx((maxes[15] + maxes[16]) / 2)
    assert none["entropy_p50"] <= none["entropy_p90"] <= none["entropy_max"]
    # tau 0: a step after any decoded token with entropy above 0 is full
    above = sum(m > 0 for m in maxes)
    assert always["full_steps_entropy"] <= above / 32 and always["full_steps_entropy"] > 0


def test_per_layer_rows_decision_time_and_prompt_length_columns(saved):
    """Rows per layer from the events (dLLM-Cache: every row at layer 0, fewer above), decision time
    per step from the totals, and the mean prompt length."""
    model, tok = load_model(saved)
    items = held_out("words", 2)
    config = DecodeConfig(gen_len=16, block_len=8, stop_at_eos=False)
    contenders = [Contender("none", {}), Contender("dllm-cache", {"prompt_every": 50, "response_every": 50})]
    none, dllm = bench_rows(bench_progress(model, tok, items, contenders, config, warmup=0), bar=False)
    assert none["layer_rows_fraction"] == [1.0] * model.config.n_layers
    assert dllm["layer_rows_fraction"][0] == 1.0 and max(dllm["layer_rows_fraction"][1:]) < 1.0
    for row in (none, dllm):
        per_step = row["decision_overhead"] * row["decode_s"] / row["steps"]
        assert row["decision_us_per_step"] == pytest.approx(per_step * 1e6)
    lengths = [len(chat_prompt_ids(tok, item.prompt)) for item in items]
    assert none["prompt_len"] == dllm["prompt_len"] == sum(lengths) / 2


def test_a_shot_list_runs_one_bench_per_context_length(saved, tmp_path):
    out = tmp_path / "rows.json"
    res = bench_cli("--model", str(saved), "--policies", "none,entropy", "--shots", "0,1", "--n", "1",
                    "--gen-len", "16", "--block", "8", "--warmup", "0", "--json", str(out))
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert [(r["shots"], r["policy"]) for r in rows] == [(0, "none"), (0, "entropy"), (1, "none"), (1, "entropy")]
    assert rows[2]["prompt_len"] > rows[0]["prompt_len"]  # a worked example before the problem
    assert "words, 1-shot, mean prompt" in res.stdout
    bad = bench_cli("--model", str(saved), "--shots", "0,x")
    assert bad.returncode == 2 and "--shots must be a non-negative integer or a comma list of them" in bad.stderr


def test_a_threshold_run_adds_the_vanilla_decoder(saved):
    model, tok = load_model(saved)
    config = DecodeConfig(gen_len=16, block_len=8, threshold=0.3, stop_at_eos=False)
    contenders = [Contender("none", {}), Contender("dual", {})]
    rows = bench_rows(bench_progress(model, tok, held_out("words", 2), contenders, config, warmup=0), bar=False)
    assert [r["label"] for r in rows] == ["none", "dual", "none (one token per step)"]
    vanilla = rows[-1]
    assert vanilla["steps"] == 2 * 16 and vanilla["full_steps_fraction"] == 1.0  # 16 one-token steps a prompt
    for r in rows:
        assert r["speedup_vs_vanilla"] == pytest.approx(vanilla["decode_s"] / r["decode_s"])
    assert rows[0]["steps"] < vanilla["steps"]  # the threshold unmasks several tokens a step


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shots", "-1"], "--shots must be a non-negative integer, got -1"),
        (["--gen-len", "992", "--block", "32"], "prompt (51 tokens) + gen_len (992) exceeds the model's 1024"),
        (["--shots", "8", "--gen-len", "512"], "the longest prompt (670 tokens) + gen_len (512) exceeds"),
        (["--task", "stories", "--words-only"], "the model does not know 8 words of the prompt: 'tell', 'a', 'story'"),
    ],
)
def test_task_flags_are_checked_before_the_weights_load(tmp_path, args, message):
    """The embedded model's config and tokenizer without its weights (with "--words-only", a tokenizer of
    the word problems' words alone): the flags' error comes first."""
    from tiny_models import word_problems_tokenizer

    from core.loading import EMBEDDED

    for f in EMBEDDED.iterdir():
        if f.suffix != ".safetensors":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    if "--words-only" in args:
        args = [a for a in args if a != "--words-only"]
        word_problems_tokenizer().save_pretrained(tmp_path)
    res = bench_cli("--model", str(tmp_path), "--n", "2", *args)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_the_embedded_model_answers_k_shot_problems():
    """The embedded model (docs/EMBEDDED_MODEL.md) loads with its own decode defaults and answers 4-shot
    held-out problems right (with EntropyCache: the exact decoder takes ~30 s a problem)."""
    model, tok = load_model("embedded")
    config = DecodeConfig(gen_len=model.config.gen_len, block_len=model.config.block_len)
    assert (config.gen_len, config.block_len, model.config.max_seq_len) == (256, 32, 1024)
    for item in held_out("words", 2, shots=4):
        ids = chat_prompt_ids(tok, item.prompt)
        assert len(ids) > 250  # a real k-shot context
        answer = answer_text(tok, generate(model, ids, make_policy("entropy"), config))
        assert is_correct(item, answer), answer


def test_story_rows_say_how_many_events_repeat_an_earlier_one():
    """Beside the checker's pass: the pooled share of the answers' events seen before in the same story
    (words have none: no column)."""
    from evaluation.tasks import story_checker

    model, tok = load_model("embedded")
    items = held_out("mix", 3)  # a word problem, a story, a word problem
    config = DecodeConfig(gen_len=64, block_len=32)
    rows = bench_rows(bench_progress(model, tok, items, [Contender("none", {})], config, warmup=0), bar=False)
    story = items[1]
    answer = answer_text(tok, generate(model, chat_prompt_ids(tok, story.prompt), make_policy("none"), config))
    repeated, events = story_checker.repeated_events(answer)
    assert events > 0 and rows[0]["repeat_share"] == repeated / events
    assert "repeats" in format_table(rows)
    words = bench_rows(bench_progress(model, tok, held_out("words", 1), [Contender("none", {})], config, warmup=0),
                       bar=False)
    assert words[0]["repeat_share"] is None and "repeats" not in format_table(words)


def test_the_embedded_model_writes_a_held_out_story_the_checker_accepts():
    """The embedded model, the exact decoder at its defaults: a held-out story prompt gets a story of
    100-230 words that the checker passes."""
    from evaluation.tasks import stories, story_checker

    model, tok = load_model("embedded")
    story = stories.make_split("test", 2)[1]
    config = DecodeConfig(gen_len=model.config.gen_len, block_len=model.config.block_len)
    answer = answer_text(tok, generate(model, chat_prompt_ids(tok, story.prompt), make_policy("none"), config))
    assert story_checker.check_story(story, answer) == (True, ""), answer


def test_the_arithmetic_floor_is_a_pass_flops_at_the_measured_rate(saved):
    """The floor divides the pass's count by the rate; the rate is a product's FLOPs over its time."""
    from core.loading import load_model
    from evaluation.forward_cost import arithmetic_floor_s, gemm_rate, pass_flops

    model, _ = load_model(saved)
    rate = gemm_rate(model, 24, repeats=2)
    assert rate > 0
    cfg = model.config
    assert arithmetic_floor_s(cfg, 6, 24, 1, 1e9) == pass_flops(cfg, 6, 24, 1) / 1e9
    assert arithmetic_floor_s(cfg, 24, 24, 24, 1e9) > arithmetic_floor_s(cfg, 6, 24, 1, 1e9)
