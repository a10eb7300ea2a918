"""Training recipes, `python -m training recipe`: the embedded model's whole recipe runs from today's code,
continues where it stopped, and makes a model with the shipped model's config and vocabulary."""

import argparse
import json
import textwrap
from pathlib import Path

import pytest
import torch

from core.config import DecodeConfig
from core.decoder import generate
from core.loading import EMBEDDED, chat_prompt_ids, load_model
from core.policies import make_policy
from evaluation.tasks.word_problems import example_prompt
from training import train
from training.cli import main
from training.recipes import RECIPES, command_lines, stage_argv

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "sums-and-stories"


def vocabulary(folder: Path) -> dict[str, int]:
    return json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]


def test_the_recipe_resumes_and_makes_the_shipped_models_config_and_vocabulary(tmp_path, capsys):
    """Two steps per stage: the models are untrained, but every setting that shapes them is the recipe's."""
    out = tmp_path / "recipe"
    first, second = RECIPES[RECIPE]
    assert main(["train", *stage_argv(RECIPE, first, out, steps=2), "--until", "1"]) == 0  # interrupted at step 1
    assert main(["recipe", RECIPE, "--out", str(out), "--steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "stage 1 of 2, word-problems" in printed and "resuming" in printed and "step 1 of 2" in printed
    assert "stage 2 of 2, mixture" in printed and "starting" in printed
    for stage in (first, second):
        state = json.loads((out / stage.name / "state" / "state.json").read_text())
        assert state["step"] == 2 and state["finished"]

    shipped = json.loads((EMBEDDED / "config.json").read_text())
    model_dir = out / second.name / "model"
    assert json.loads((model_dir / "config.json").read_text()) == shipped
    assert vocabulary(model_dir) == vocabulary(EMBEDDED)
    assert (model_dir / "chat_template.jinja").read_text() == (EMBEDDED / "chat_template.jinja").read_text()
    first_dir = out / first.name / "model"
    # the first stage's model as it was shipped before the mixture (assets/wordproblems-diffusion at f4cbe8c)
    assert json.loads((first_dir / "config.json").read_text()) == {
        **shipped, "vocab_size": 121, "max_seq_len": 512, "gen_len": 64, "task_settings": {}}
    assert set(vocabulary(first_dir)) < set(vocabulary(EMBEDDED)) and len(vocabulary(first_dir)) == 121

    model, tok = load_model(model_dir)
    last = generate(model, chat_prompt_ids(tok, example_prompt()), make_policy("entropy"),
                    DecodeConfig.for_model(model.config, gen_len=32))
    assert last.totals.steps == 32 and not (torch.as_tensor(last.tokens) == model.config.mask_token_id).any()

    weights = (model_dir / "model.safetensors").read_bytes()
    assert main(["recipe", RECIPE, "--out", str(out), "--steps", "2"]) == 0  # run again: nothing left to do
    assert capsys.readouterr().out.count(": done, ") == 2
    assert (model_dir / "model.safetensors").read_bytes() == weights
    assert main(["recipe", RECIPE, "--out", str(out), "--steps", "3"]) == 2  # never mixes two runs' settings
    assert "was trained with --steps 2, this run asks for 3" in capsys.readouterr().err


def test_a_recipe_folder_that_cannot_be_written_is_refused_before_any_stage(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    for out, message in (("", "--out '': name a folder"),  # not the working folder's stages
                         ("file", f"--out 'file': {tmp_path / 'file'} is a file, not a folder")):
        with pytest.raises(SystemExit) as exit_info:
            main(["recipe", RECIPE, "--out", out])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"recipe: error: {message}" in err and "training train" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_stages_are_the_runs_that_made_the_shipped_model():
    """Every setting of each stage, the trainer's defaults included: stage 1 is commit 507b5ee's trainer
    with its defaults and `--steps 6000 --minutes 57 --save-every 500`; stage 2 the command line that
    made assets/sums-and-stories from it. A change of a default the recipe relies on fails here."""
    ap = argparse.ArgumentParser()
    train.add_arguments(ap)
    first, second = (vars(ap.parse_args(stage_argv(RECIPE, s, Path("out")))) for s in RECIPES[RECIPE])
    architecture = {"dim": 256, "layers": 6, "heads": 4, "ffn": 768, "seed": 0, "number_init": 0.5}
    expected_first = {
        **architecture, "init_from": None, "steps": 6000, "minutes": 57, "save_every": 500, "lr": 2e-3,
        "warmup": 100, "batch_rows": 32, "stories": 0, "drills": 0, "drill_rows": 0.25, "long_words": 0,
        "max_shots": 0, "block_prefix": 0, "vocabulary": "words-0-shot", "gen_len": 64, "max_seq_len": 512,
        "story_temperature": 0,
    }
    expected_second = {
        **architecture, "init_from": "out/word-problems/model", "steps": 6000, "minutes": 63, "save_every": 100,
        "lr": 1e-3, "warmup": 50, "batch_tokens": 8192, "batch_rows": None, "stories": 0.55, "drills": 0.1,
        "drill_rows": 0, "long_words": 0.25, "max_shots": 8, "block_prefix": 0.5, "vocabulary": "all",
        "gen_len": 256, "max_seq_len": 1024, "story_temperature": 0.7,
    }
    bookkeeping = {"out", "state", "resume", "until", "pause_after"}
    for args, expected in ((first, expected_first), (second, expected_second)):
        assert {k: args[k] for k in expected} == expected
    assert set(first) - set(expected_first) == bookkeeping | {"batch_tokens"}  # unused: the batch is 32 rows
    assert set(second) == set(expected_second) | bookkeeping  # a new flag must be pinned here


def test_the_docs_give_the_recipe_as_declared():
    doc = (ROOT / "docs" / "EMBEDDED_MODEL.md").read_text()
    command = f"python -m training recipe {RECIPE} --out runs/{RECIPE}"
    assert command in doc and command in (ROOT / "README.md").read_text()
    assert textwrap.indent(command_lines(RECIPE, Path(f"runs/{RECIPE}")), "    ") in doc
