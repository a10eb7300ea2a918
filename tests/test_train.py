"""The training script: it saves a loadable checkpoint, and a resumed run equals an uninterrupted one."""

import torch
from safetensors.torch import load_file

from core.loading import load_model
from core.task import extract_answer, make_split
from core.train import main as train

TINY = [
    "--batch",
    "4",
    "--dim",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--ffn",
    "64",
    "--minutes",
    "1000",
    "--warmup",
    "1",
    "--steps",
    "5",
]  # past warm-up: the cosine schedule is exercised


def test_resume_is_exact_and_output_loads(tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(["--out", str(straight / "model"), "--state", str(straight / "state"), *TINY])
    train(["--until", "2", "--out", str(split / "model"), "--state", str(split / "state"), *TINY])
    train(["--out", str(split / "model"), "--state", str(split / "state"), "--resume", *TINY])
    a = load_file(straight / "state" / "model.safetensors")
    b = load_file(split / "state" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    model, tok = load_model(straight / "model")
    assert model.config.n_layers == 1 and tok.mask_token_id == model.config.mask_token_id
    assert model.decode_defaults == {"gen_len": 64, "block_len": 32}


def test_task_answers_are_exact():
    problems = make_split("test", 200)
    assert len({p.prompt for p in problems}) > 190
    for p in problems:
        assert extract_answer(p.answer_text) == p.answer
        assert 0 <= p.answer <= 60
    assert extract_answer("mia starts with 3 apples . the answer is") is None
    assert make_split("test", 5) == problems[:5]  # deterministic
    assert not {p.prompt for p in make_split("train", 300)} & {p.prompt for p in problems}
