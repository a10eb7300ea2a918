"""The lm-eval adapter: model `entropycache` through lm-evaluation-harness's own entry points, on our
held-out word problems written as an lm-eval task, against our own bench on the same prompts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval")  # requirements-eval.txt; the test command installs it

from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from core.config import DecodeConfig  # noqa: E402
from core.loading import chat_prompt_ids, load_model  # noqa: E402
from evaluation.bench import Contender, bench_progress, bench_rows  # noqa: E402
from evaluation.cli import main  # noqa: E402
from evaluation.lm_eval_model import EntropyCacheLM, cut_at_stop, parse_model_args, render_chat  # noqa: E402
from evaluation.lm_eval_ranks import Launch, cpu_threads  # noqa: E402
from evaluation.tasks import held_out  # noqa: E402
from evaluation.tasks.lm_eval_export import write_task  # noqa: E402

GEN = {"gen_len": 64, "block_len": 32}
METRIC = "exact_match,final_number"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def evaluate(folder: Path, task: str, shots: int, **model_args) -> tuple[dict, EntropyCacheLM]:
    results = simple_evaluate(
        model="entropycache", model_args=model_args | GEN, tasks=[task], num_fewshot=shots, device="cpu",
        # our task alone: indexing lm-eval's own thousands of task files takes seconds
        task_manager=TaskManager(include_path=str(folder), include_defaults=False), apply_chat_template=True,
        fewshot_as_multiturn=False,
        log_samples=True,
    )
    return results, EntropyCacheLM.last


@pytest.mark.parametrize(("shots", "n"), [(0, 4), (4, 2)])
def test_lm_eval_scores_what_our_bench_scores_on_the_same_prompts(tmp_path, shots: int, n: int) -> None:
    task = write_task(tmp_path, n, shots)
    exact, _ = evaluate(tmp_path, task, shots, policy="none")
    ours, lm = evaluate(tmp_path, task, shots, policy="entropy", tau=0.5, k=2, baseline="none")

    model, tokenizer = load_model()
    items = held_out("words", n, shots)
    contenders = [Contender("none", {}), Contender("entropy", {"tau": 0.5, "k": 2})]
    rows = bench_rows(bench_progress(model, tokenizer, items, contenders, DecodeConfig(**GEN), warmup=0),
                      bar=False)  # timings unread: no warm-up needed
    assert exact["results"][task][METRIC] == rows[0]["accuracy"]
    assert ours["results"][task][METRIC] == rows[1]["accuracy"]
    # The prompts lm-eval built are the bench's, token for token.
    contexts = [s["arguments"][0][0] for s in ours["samples"][task]]  # (context, gen_kwargs) per request
    assert [lm.prompt_ids(c) for c in contexts] == [chat_prompt_ids(tokenizer, item.prompt) for item in items]
    speed = lm.speed_summary()
    assert speed["requests"] == n and speed["baseline"]["requests"] == n and len(speed["per_request"]) == 2 * n
    assert speed["speedup_vs_none"] == speed["baseline"]["decode_s"] / speed["decode_s"]
    assert 0 < speed["rows_fraction"] < 1 == speed["baseline"]["rows_fraction"]
    assert speed["policy"] == "entropy(tau=0.5, k=2)"


def test_the_command_line_adds_the_speed_summary_to_lm_evals_results(tmp_path, capsys) -> None:
    task = write_task(tmp_path / "task", 3, 0)
    out = tmp_path / "out"
    code = main(["lm-eval", "--model", "entropycache", "--model_args", "policy=entropy,baseline=none,gen_len=64",
                 "--device", "cpu", "--include_path", str(tmp_path / "task"), "--tasks", task,
                 "--apply_chat_template", "--fewshot_as_multiturn", "false", "--output_path", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "entropycache speed:" in printed and "| entropy(tau=1.0, k=2) | 3 |" in printed and "vs none" in printed
    (results,) = list(out.rglob("results_*.json"))
    data = json.loads(results.read_text())
    assert METRIC in data["results"][task]
    assert data["entropycache_speed"]["requests"] == 3 and "speedup_vs_none" in data["entropycache_speed"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"policy": "fast"}, "unknown policy 'fast'; choose from"),
        ({"baseline": "slow"}, "unknown policy 'slow'"),
        ({"tau": "high"}, "tau must be a number, got 'high'"),
        ({"k": -1}, "k must be a non-negative integer, got -1"),
        ({"rho": 0.5}, "unknown model arg 'rho' for policy 'entropy'; allowed: gen_len"),
        ({"gen_len": "long"}, "gen_len must be an integer in [1, 8192], got 'long'"),
        ({"threshold": True}, "threshold must be a number in (0, 1], got True"),
        ({"dtype": "int8"}, "dtype must be float32, bfloat16 or float16, got 'int8'"),
        ({"graphs": "yes"}, "graphs must be one of auto, on, off, got 'yes'"),
    ],
)
def test_bad_model_args_get_a_message_naming_them(args: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_model_args(args)


def test_bad_args_fail_before_any_weights_load(monkeypatch) -> None:
    import evaluation.lm_eval_model as adapter

    monkeypatch.setattr(adapter, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(ValueError, match="could not get 'nobody/no-such-model' from the hub or its cache"):
        EntropyCacheLM(pretrained="nobody/no-such-model", device="cpu")
    with pytest.raises(ValueError, match="gen_len must be an integer in"):
        EntropyCacheLM(gen_len=0, device="cpu")
    if not adapter.torch.cuda.is_available():
        with pytest.raises(ValueError, match="pass --device cpu"):
            EntropyCacheLM.create_from_arg_string("policy=entropy", {"device": "cuda:0", "batch_size": 1})


def test_model_args_win_over_lm_evals_default_device() -> None:
    lm = EntropyCacheLM.create_from_arg_string("device=cpu,gen_len=32", {"device": "cuda:0", "batch_size": 8})
    assert str(lm.device) == "cpu" and lm.config.gen_len == 32 and lm.config.graphs == "auto"
    assert EntropyCacheLM.create_from_arg_string("device=cpu,graphs=on").config.graphs == "on"
    with pytest.raises(NotImplementedError, match="generation tasks only"):
        lm.loglikelihood([])


def test_stop_sequences_cut_the_text_at_the_first_one() -> None:
    assert cut_at_stop("a b question : c", ["question :"]) == "a b "
    assert cut_at_stop("x\n\ny Q: z", ["Q:", "\n\n"]) == "x"
    assert cut_at_stop("x", "x") == "" and cut_at_stop("abc", None) == "abc" and cut_at_stop("abc", []) == "abc"


def test_a_chat_prompts_contents_stay_text() -> None:
    _, tokenizer = load_model(None)
    question = "mia has 7 marbles . how many marbles does mia have now ?"
    rendered, ids = render_chat(tokenizer, [{"role": "user", "content": question}], add_generation_prompt=True)
    assert ids == chat_prompt_ids(tokenizer, question) and question in rendered
    sneaky = [{"role": "user", "content": "<|mask|>"}]
    _, ids = render_chat(tokenizer, sneaky, add_generation_prompt=True)
    assert tokenizer.mask_token_id not in ids  # written as characters, never the mask token


def lm_eval_args(task_dir: Path, task: str, out: Path, model_args: str) -> list[str]:
    return ["--model", "entropycache", "--model_args", model_args, "--device", "cpu", "--include_path", str(task_dir),
            "--tasks", task, "--apply_chat_template", "--fewshot_as_multiturn", "false", "--output_path", str(out),
            "--log_samples"]


def written(out: Path) -> tuple[dict, dict[int, dict]]:
    """(the results JSON, the logged samples by document) that lm-eval wrote under --output_path."""
    (results,) = out.rglob("results_*.json")
    (samples,) = out.rglob("samples_*.jsonl")
    docs = [json.loads(line) for line in samples.read_text().splitlines()]
    return json.loads(results.read_text()), {d["doc_id"]: d for d in docs}


DOCS = 4  # two a rank


def test_two_processes_answer_and_score_what_one_does(tmp_path) -> None:
    task = write_task(tmp_path / "task", DOCS, 0)
    # One process, on as many threads as each of the two ranks gets, so that every sum runs in the same order.
    threads = torch.get_num_threads()
    torch.set_num_threads(cpu_threads(Launch(world_size=2, local_world_size=2)))
    try:
        args = lm_eval_args(tmp_path / "task", task, tmp_path / "one", "policy=entropy,gen_len=64")
        assert main(["lm-eval", *args]) == 0
    finally:
        torch.set_num_threads(threads)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = lm_eval_args(tmp_path / "task", task, tmp_path / "two", "policy=entropy,baseline=none,gen_len=64")
    done = subprocess.run([*launcher, "-m", "evaluation", "lm-eval", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("entropycache speed:") == 1  # rank 0 alone prints it

    one, one_docs = written(tmp_path / "one")
    two, two_docs = written(tmp_path / "two")
    assert two["results"][task][METRIC] == one["results"][task][METRIC]
    assert sorted(two_docs) == sorted(one_docs) == list(range(DOCS))
    for doc_id, doc in one_docs.items():
        assert two_docs[doc_id]["resps"] == doc["resps"] and two_docs[doc_id]["filtered_resps"] == doc["filtered_resps"]

    speed = two["entropycache_speed"]
    assert speed["processes"] == 2 and speed["requests"] == DOCS and speed["baseline"]["requests"] == DOCS
    records = speed["per_request"]
    assert [(r["doc_id"], r["policy"]) for r in records] == [(d, p) for d in range(DOCS) for p in ("entropy", "none")]
    assert [r["rank"] for r in records] == [d % 2 for d in range(DOCS) for _ in "ab"]  # lm-eval's shards: i on i % 2
    # Each rank decoded the very steps the single process did.
    alone = {r["doc_id"]: r for r in one["entropycache_speed"]["per_request"]}
    for r in records[::2]:
        assert {k: r[k] for k in ("steps", "full_steps", "rows_computed", "tokens")} == \
            {k: alone[r["doc_id"]][k] for k in ("steps", "full_steps", "rows_computed", "tokens")}


def test_lm_evals_padding_of_a_short_rank_is_not_decoded_again() -> None:
    lm = EntropyCacheLM(device="cpu", policy="none", gen_len=32)
    first, second = (Instance("generate_until", {}, (item.prompt, {"until": ["question :"]}), 0, ("t", i, 1))
                     for i, item in enumerate(held_out("words", 2, 0)))
    # lm-eval pads a rank with fewer requests with copies of its last one, past that request's repeats.
    answers = lm.generate_until([first, second, second, second])
    assert answers[2] == answers[3] == answers[1] != answers[0]
    assert [(r["task"], r["doc_id"], r["rank"]) for r in lm.speed.requests] == [("t", 0, 0), ("t", 1, 0)]
    twice = Instance("generate_until", {}, first.arguments, 0, ("t", 0, 2))
    lm.generate_until([twice, twice])  # a task's own repeats are each decoded
    assert len(lm.speed.requests) == 4


def test_set_ups_that_cannot_work_are_refused_before_any_weights_load(tmp_path, monkeypatch, capsys) -> None:
    import evaluation.lm_eval_model as adapter
    import evaluation.lm_eval_ranks as ranks

    monkeypatch.setattr(adapter, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    monkeypatch.setattr(ranks, "Accelerator", lambda *a, **k: pytest.fail("a process group started"))
    task = write_task(tmp_path, 2, 0)
    code = main(["lm-eval", *lm_eval_args(tmp_path, f"{task},ai2_arc,mmlu", tmp_path / "out", "policy=entropy")])
    assert code == 2
    assert re.search(r"generation tasks only .*; multiple_choice requests need a likelihood .*: --tasks holds "
                     r"arc_challenge \(multiple_choice\), arc_easy \(multiple_choice\), mmlu_\w+ \(multiple_choice\), "
                     r"mmlu_\w+ \(multiple_choice\) and 55 more$", capsys.readouterr().err.strip())

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun and accelerate launch set it for each process
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="device_map=auto spreads one model over every GPU of the machine, and "
                                         "there are 2 processes"):
        EntropyCacheLM(device="cpu", device_map="auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=re.escape("2 processes on this machine but 1 CUDA GPU(s) visible: each "
                                                   "process decodes on its own GPU (cuda:LOCAL_RANK), so launch at "
                                                   "most 1 (accelerate launch --num_processes 1)")):
        EntropyCacheLM(device="cuda")
    with pytest.raises(ValueError, match="device_map must be auto, got 'balanced'"):
        EntropyCacheLM(device="cpu", device_map="balanced")
