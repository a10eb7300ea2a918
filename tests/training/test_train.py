"""The trainer, `python -m training train`: it saves a loadable checkpoint, and a resumed run equals an
uninterrupted one."""

import json

import pytest
import torch
from safetensors.torch import load_file

from core.loading import load_model
from evaluation.tasks.word_problems import extract_answer, make_split
from training import train as trainer
from training.batches import DRILL_LEN, GEN_LEN, SHORT_LEN, make_batch, pick_kind, result_groups, vocabulary
from training.cli import main
from training.objective import EPS, diffusion_loss, hidden_mask
from training.word_tokenizer import build_tokenizer


def train(argv: list[str]) -> int:
    """`python -m training train ...`, in process."""
    return main(["train", *argv])

TINY = [
    "--batch-tokens",
    "600",
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


def test_resume_is_exact_and_output_loads(tmp_path, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(["--out", str(straight / "model"), "--state", str(straight / "state"), *TINY])
    train(["--until", "2", "--out", str(split / "model"), "--state", str(split / "state"), *TINY])
    assert not json.loads((split / "state" / "state.json").read_text())["finished"]  # paused, not done
    train(["--out", str(split / "model"), "--state", str(split / "state"), "--resume", *TINY])
    assert json.loads((split / "state" / "state.json").read_text())["finished"]
    a = load_file(straight / "state" / "model.safetensors")
    b = load_file(split / "state" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    model, tok = load_model(straight / "model")
    assert model.config.n_layers == 1 and tok.mask_token_id == model.config.mask_token_id
    assert (model.config.gen_len, model.config.block_len, model.config.max_seq_len) == (256, 32, 1024)
    for flags, change in ((["--dim", "64"], "--dim 32, this run asks for 64"),  # a wider model
                          (["--lr", "0.001"], "--lr 0.002, this run asks for 0.001"),  # fits, but mixes two runs
                          (["--seed", "1"], "--seed 0, this run asks for 1")):
        with pytest.raises(SystemExit) as exit_info:
            train(["--out", str(split / "model"), "--state", str(split / "state"), "--resume", *TINY, *flags])
        assert exit_info.value.code == 2 and f"--resume: {split / 'state'} was trained with {change}: resume with " \
            "the flags it was started with" in capsys.readouterr().err


@pytest.mark.parametrize("native", [True, False])
def test_steps_run_under_bfloat16_autocast_only_where_the_cpu_has_bfloat16_arithmetic(tmp_path, capsys, monkeypatch,
                                                                                      native):
    seen = []

    def loss(model, *args):
        seen.append(torch.is_autocast_enabled("cpu"))
        return diffusion_loss(model, *args)

    monkeypatch.setattr(trainer, "native_bfloat16", lambda: native)
    monkeypatch.setattr(trainer, "diffusion_loss", loss)
    train(["--out", str(tmp_path / "model"), "--state", str(tmp_path / "state"), *TINY])
    assert seen == [native] * 5
    said = "bfloat16 autocast" if native else "float32 (this CPU has no bfloat16 arithmetic of its own)"
    assert said in capsys.readouterr().out


def test_task_answers_are_exact():
    problems = make_split("test", 200)
    assert len({p.prompt for p in problems}) > 190
    for p in problems:
        assert extract_answer(p.answer_text) == p.answer
        assert 0 <= p.answer <= 60
    assert extract_answer("mia starts with 3 apples . the answer is") is None
    assert make_split("test", 5) == problems[:5]  # deterministic
    assert not {p.prompt for p in make_split("train", 300)} & {p.prompt for p in problems}


def test_result_groups_tie_each_result_to_its_copies():
    words = "sam starts with 13 cookies . 13 + 10 = 23 . 23 * 2 = 46 . the answer is 46 .".split()
    groups = result_groups(words)
    assert [(w, g) for w, g in zip(words, groups) if g] == [("23", 1), ("23", 1), ("46", 2), ("46", 2)]
    assert groups.index(1) == 10 and groups.index(2) == 16  # the results after "=", then the copies


def test_hidden_mask_hides_whole_groups_and_stratifies_t():
    import random

    batch = make_batch(build_tokenizer(vocabulary()), random.Random(0), 64 * 320, "words", 0)
    ids, groups = batch.ids, batch.groups
    b = ids.shape[0]
    assert 60 <= b <= 68 and b * ids.shape[1] <= 64 * 320  # 0-shot rows are ~300 tokens: about 64 of them fit
    by_t, by_group, t = hidden_mask(batch.targets, groups, torch.Generator().manual_seed(0))
    stratum = ((t.flatten() - EPS) / (1 - EPS) * b).long()
    assert sorted(stratum.tolist()) == list(range(b))  # one t in each b-th of (EPS, 1)
    assert not by_group[groups == 0].any() and not by_t[~batch.targets].any()  # only targets are hidden
    for row in range(b):
        for g in range(1, int(groups[row].max()) + 1):
            hidden = by_group[row, groups[row] == g]
            assert hidden.all() or not hidden.any()  # a result is never hidden without its copies
    rows_with_groups = by_group.any(1).sum().item()
    assert 8 < rows_with_groups < 40  # about half the rows, then about half their groups


def test_number_init_puts_numbers_on_a_line_and_keeps_norms():
    from tiny_models import tiny_model

    from training.init_weights import init_number_rows

    model = tiny_model(vocab_size=80, dim=64)
    before = model.embed.weight.detach().clone(), model.lm_head.weight.detach().clone()
    numbers = list(range(10, 71))  # token ids of the values 0..60
    init_number_rows(model, numbers, mix=0.5)
    for weight, old in zip((model.embed.weight, model.lm_head.weight), before):
        assert torch.allclose(weight.norm(dim=1), old.norm(dim=1), atol=1e-5)  # same scale as the random init
        assert torch.equal(weight[:10], old[:10]) and torch.equal(weight[71:], old[71:])  # other tokens untouched
        unit = torch.nn.functional.normalize(weight[numbers], dim=1)
        near = (unit[20] @ unit[21]).item()
        far = (unit[20] @ unit[55]).item()
        assert near > far + 0.2, (near, far)  # 20 is closer to 21 than to 55


def test_drills_are_exact_facts_in_the_answer_format():
    import random

    from evaluation.tasks.word_problems import MAX_VALUE, make_drill

    rng = random.Random(0)
    seen = set()
    for _ in range(200):
        prompt, answer = make_drill(rng)
        facts = answer.rstrip(" .").split(" . ")
        assert len(facts) == 10 and len(answer.split()) <= 64  # fits the response canvas
        assert prompt == " . ".join(f.split(" = ")[0] for f in facts) + " ."  # operands come from the prompt
        for fact in facts:
            a, op, n, eq, r = fact.split()
            assert eq == "=" and 0 <= int(r) <= MAX_VALUE
            assert int(r) == {"+": int(a) + int(n), "-": int(a) - int(n), "*": int(a) * int(n), "/": int(a) // 2}[op]
            if op == "/":
                assert int(a) % 2 == 0 and n == "2"
            seen.add(int(a))
    assert max(seen) > 55  # large values are drilled, not only the problems' small starts


def test_drill_rows_hide_results_without_tying_them_to_the_next_operand():
    import random

    tok = build_tokenizer(vocabulary())
    batch = make_batch(tok, random.Random(0), 16 * 110, "drills")
    for row in range(batch.ids.shape[0]):
        words = tok.convert_ids_to_tokens(batch.ids[row, -DRILL_LEN:].tolist())
        results = [i for i in range(1, len(words)) if words[i - 1] == "="]
        assert batch.groups[row, -DRILL_LEN:].nonzero().flatten().tolist() == results  # each result alone
        assert "answer" not in words
    problems = make_batch(tok, random.Random(0), 16 * 320, "words")
    assert all("answer is" in tok.decode(r) for r in problems.ids)


def test_k_shot_rows_train_every_answer_and_nothing_else():
    """A k-shot row: the worked examples' answers and the response canvas are targets, the questions
    and the template are not; result groups never mix two answers."""
    import random

    tok = build_tokenizer(vocabulary())
    batch = make_batch(tok, random.Random(1), 2000, "words", shots=3)
    for row in range(batch.ids.shape[0]):
        real = batch.key_mask[row]
        words = tok.convert_ids_to_tokens(batch.ids[row][real].tolist())
        targets = batch.targets[row][real].tolist()
        canvas = words[-GEN_LEN:]
        end = canvas.index("<|eos|>")  # the answer, then only end-of-text to the canvas's end
        assert canvas[end - 5 : end - 2] == ["the", "answer", "is"] and set(canvas[end:]) == {"<|eos|>"}
        assert all(targets[-GEN_LEN:])  # the whole canvas: answer and end-of-text padding
        trained = " ".join(w for w, t in zip(words[:-GEN_LEN], targets[:-GEN_LEN]) if t)
        assert trained.count("the answer is") == 3 and "question" not in trained and "how many" not in trained
        assert words.count("question") == 4 and "<|user|>" in words and not any(targets[: words.index(":")])
        groups = batch.groups[row][real].tolist()
        starts = [i for i, w in enumerate(words) if w == "starts"]  # one per answer
        for a, b in zip(starts, starts[1:]):  # each answer's groups are its own
            assert not set(groups[a:b]) - {0} & set(groups[b:]) - {0}
    assert batch.ids.shape[0] * batch.ids.shape[1] <= 2000 or batch.ids.shape[0] == 1


def test_story_rows_and_the_mixture():
    import random

    from evaluation.tasks.stories import is_held_out
    from evaluation.tasks.story_checker import check_story

    tok = build_tokenizer(vocabulary())
    batch = make_batch(tok, random.Random(2), 4000, "stories")
    for row in range(batch.ids.shape[0]):
        words = tok.convert_ids_to_tokens(batch.ids[row][batch.key_mask[row]].tolist())
        prompt = " ".join(words[words.index("<|user|>") + 1 : words.index("<|assistant|>")])
        story = " ".join(w for w in words[words.index("<|assistant|>") + 1 :] if w != "<|eos|>")
        assert check_story(prompt, story).ok and not is_held_out(prompt)
        assert batch.targets[row, -GEN_LEN:].all() and not batch.targets[row, :-GEN_LEN].any()
        answer = batch.groups[row, -GEN_LEN:]
        pet = words[words.index("<|user|>") + 8]  # "tell a story about mia and a dog ..."
        at_pet = [i for i, w in enumerate(words[-GEN_LEN:]) if w == pet]
        assert len(at_pet) >= 2 and len({int(answer[i]) for i in at_pet}) == 1 and answer[at_pet[0]] > 0
        at_gender = [i for i, w in enumerate(words[-GEN_LEN:]) if w in ("she", "he", "her", "his")]
        opening = next(i for i, w in enumerate(words[-GEN_LEN:]) if w in ("girl", "boy"))
        assert len({int(answer[i]) for i in [opening, *at_gender]}) == 1 and answer[opening] > 0
        assert int(answer[opening]) != int(answer[at_pet[0]])
        at_glue = [i for i, w in enumerate(words[-GEN_LEN:]) if w in ("once", "the", "<|eos|>")]
        assert not answer[at_glue].any()  # only entity words are tied to their other mentions
    assert not batch.groups[:, :-GEN_LEN].any()
    kinds = [pick_kind(random.Random(i), 0.35, 0.2, long_words=0.25) for i in range(2000)]
    share = {k: sum(kind == k for kind, _, _ in kinds) / 2000 for k in ("stories", "drills", "words")}
    assert abs(share["stories"] - 0.35) < 0.04 and abs(share["drills"] - 0.2) < 0.04
    assert {s for k, s, _ in kinds if k == "words"} == set(range(9))  # 0 to 8 worked examples
    word_canvases = [c for k, _, c in kinds if k == "words"]
    assert set(word_canvases) == {SHORT_LEN, GEN_LEN}
    assert abs(word_canvases.count(GEN_LEN) / len(word_canvases) - 0.25) < 0.05
    assert {c for k, _, c in kinds if k != "words"} == {GEN_LEN, DRILL_LEN}  # stories long, drills short


def test_block_prefix_rows_mask_every_later_block_out_of_the_loss():
    import random

    tok = build_tokenizer(vocabulary())
    plain = make_batch(tok, random.Random(4), 4000, "stories")
    cut = make_batch(tok, random.Random(4), 4000, "stories", block_prefix=1.0)
    assert not (plain.ids == tok.mask_token_id).any()
    starts = set()
    for row in range(cut.ids.shape[0]):
        canvas = cut.ids[row, -GEN_LEN:]
        masked = (canvas == tok.mask_token_id).nonzero().flatten().tolist()
        start = masked[0]
        assert start % 32 == 0 and start > 0 and masked == list(range(start, GEN_LEN))  # a block boundary on
        assert not cut.targets[row, -GEN_LEN:][start:].any() and cut.targets[row, -GEN_LEN:][:start].all()
        assert not cut.groups[row, -GEN_LEN:][start:].any()
        words = tok.convert_ids_to_tokens(canvas[:start].tolist())
        assert "<|eos|>" not in words  # the cut is inside the answer: the story goes on behind it
        starts.add(start)
    assert len(starts) > 1  # the cut falls on different blocks
    words_batch = make_batch(tok, random.Random(4), 4000, "words", block_prefix=1.0)
    assert not (words_batch.ids == tok.mask_token_id).any()  # only stories are cut


def test_a_short_word_canvas_holds_the_answer_and_its_padding():
    import random

    tok = build_tokenizer(vocabulary())
    batch = make_batch(tok, random.Random(3), 3000, "words", shots=1, canvas=SHORT_LEN)
    for row in range(batch.ids.shape[0]):
        words = tok.convert_ids_to_tokens(batch.ids[row].tolist())
        canvas = words[-SHORT_LEN:]
        assert words[-SHORT_LEN - 1] == "<|assistant|>"  # the canvas starts right after the chat frame
        answer = canvas[: canvas.index("<|eos|>")]
        assert answer[-5:-2] == ["the", "answer", "is"]
        assert canvas[len(answer) :] == ["<|eos|>"] * (SHORT_LEN - len(answer))
        assert batch.targets[row, -SHORT_LEN:].all()


def test_a_zero_shot_words_batch_mixes_drills_row_by_row_on_a_short_canvas():
    """The first stage of the embedded model: word problems asked alone, a share of each batch's rows
    drills, a fixed number of rows, every answer on a 64-token canvas, read by the 0-shot vocabulary."""
    import random

    tok = build_tokenizer(vocabulary("words-0-shot"))
    drills = problems = 0
    for seed in range(8):
        kind, shots, canvas = pick_kind(random.Random(seed), 0.0, 0.0, long_words=0.0, max_shots=0)
        assert (kind, shots, canvas) == ("words", 0, SHORT_LEN)
        batch = make_batch(tok, random.Random(seed), 100, kind, shots, canvas=canvas, n_rows=32, drill_rows=0.25)
        assert batch.ids.shape[0] == 32  # the row count, whatever the token budget
        for row in range(32):
            words = tok.convert_ids_to_tokens(batch.ids[row].tolist())
            assert words[-SHORT_LEN - 1] == "<|assistant|>" and batch.targets[row, -SHORT_LEN:].all()
            answer = " ".join(w for w in words[-SHORT_LEN:] if w != "<|eos|>")
            is_drill = "answer" not in answer
            drills += is_drill
            problems += not is_drill
            assert is_drill or extract_answer(answer) is not None
    assert 0.15 < drills / (drills + problems) < 0.35  # about a quarter of 256 rows
    plain = make_batch(tok, random.Random(0), 3000, "words", canvas=SHORT_LEN)
    assert all("answer" in tok.decode(row) for row in plain.ids)  # no drill rows unless asked


def test_the_zero_shot_vocabulary_is_the_word_problems_without_the_worked_example_frame():
    from evaluation.tasks import stories, word_problems

    zero_shot, every = vocabulary("words-0-shot"), vocabulary()
    assert len(build_tokenizer(zero_shot)) == 121 and len(build_tokenizer(every)) == 210  # 7 special tokens each
    assert set(every) - set(zero_shot) == (set(stories.WORDS) | set(word_problems.FEW_SHOT_WORDS)) - set(zero_shot)
    assert {"question", ":"} == set(word_problems.FEW_SHOT_WORDS) and not {"question", ":"} & set(zero_shot)


def test_held_out_problems_are_never_trained():
    import random

    tok = build_tokenizer(vocabulary())
    held = frozenset(p.prompt for p in make_split("test", 1000))
    for seed in range(20):
        batch = make_batch(tok, random.Random(seed), 3000, "words", shots=2, held_out=held)
        for row in batch.ids:
            text = tok.decode(row, skip_special_tokens=True)
            assert not any(prompt in text for prompt in held)


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--drills", "1.5", "--drills must be a share in [0, 1], got 1.5"),
        ("--number-init", "-0.1", "--number-init must be a share in [0, 1], got -0.1"),
        ("--block-prefix", "1.5", "--block-prefix must be a share in [0, 1], got 1.5"),
        ("--batch-tokens", "0", "--batch-tokens must be a positive integer, got 0"),
        ("--stories", "0.9", "--drills + --stories must be at most 1, got 1.1"),
        ("--pause-after", "0", "--pause-after must be a positive number, got 0"),
        ("--steps", "-3", "--steps must be a positive integer, got -3"),
        ("--until", "0", "--until must be a positive integer, got 0"),
        ("--save-every", "0", "--save-every must be a positive integer, got 0"),
        ("--warmup", "-1", "--warmup must be a non-negative integer, got -1"),
        ("--lr", "nan", "--lr must be a positive number, got nan"),
        ("--minutes", "0", "--minutes must be a positive number, got 0"),
        ("--heads", "3", "dim 32 is not divisible by n_heads 3"),
        ("--drill-rows", "1.5", "--drill-rows must be a share in [0, 1], got 1.5"),
        ("--batch-rows", "0", "--batch-rows must be a positive integer, got 0"),
        ("--max-shots", "9", "--max-shots must be in [0, 8], got 9"),
        ("--gen-len", "2048", "--gen-len 2048 does not fit --max-seq-len 1024"),
        ("--gen-len", "48", "default gen_len 48 must be a multiple of block_len 32"),
        ("--vocabulary", "words-0-shot", "--vocabulary words-0-shot has no story words"),
    ],
)
def test_bad_numbers_are_refused_before_training(tmp_path, capsys, flag, value, message):
    with pytest.raises(SystemExit) as exit_info:
        train(["--out", str(tmp_path / "m"), "--state", str(tmp_path / "s"), *TINY, flag, value])
    assert exit_info.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "s").exists() and not (tmp_path / "m").exists()  # nothing trained or saved


def test_warm_start_keeps_every_weight_and_matches_embedding_rows_by_token(tmp_path):
    from core.config import ModelConfig
    from core.model import DiffusionTransformer
    from evaluation.tasks import word_problems
    from training.checkpoint import save_own_model
    from training.init_weights import warm_start

    def tiny(tokenizer):
        cfg = ModelConfig(vocab_size=len(tokenizer), dim=32, n_layers=1, n_heads=2, ffn_dim=64,
                          mask_token_id=tokenizer.mask_token_id, eos_token_ids=(tokenizer.eos_token_id,))
        return DiffusionTransformer(cfg)

    words_only = build_tokenizer(word_problems.VOCABULARY)
    torch.manual_seed(0)
    source = tiny(words_only)
    save_own_model(source, words_only, tmp_path / "m1", dtype=torch.float32)
    everything = build_tokenizer(vocabulary())
    target = tiny(everything)
    fresh = target.embed.weight.clone()
    new = warm_start(target, everything, tmp_path / "m1")

    assert new == sorted(set(everything.get_vocab()) - set(words_only.get_vocab())) and "story" in new
    old_rows, new_rows = words_only.get_vocab(), everything.get_vocab()
    assert old_rows["="] != new_rows["="]  # the vocabularies are sorted, so shared tokens move
    for name in ("embed.weight", "lm_head.weight"):
        for token in ("=", "mia", "12", "<|mask|>"):
            assert torch.equal(target.state_dict()[name][new_rows[token]], source.state_dict()[name][old_rows[token]])
    assert torch.equal(target.embed.weight[new_rows["story"]], fresh[new_rows["story"]])
    for name, weight in target.state_dict().items():
        if name not in ("embed.weight", "lm_head.weight"):
            assert torch.equal(weight, source.state_dict()[name]), name


def test_output_folders_that_cannot_be_written_and_a_resume_without_state_are_refused_before_training(
        tmp_path, capsys):
    (tmp_path / "file").write_text("")
    for flags, message in (
        (["--out", str(tmp_path / "file" / "m")], f"--out {str(tmp_path / 'file' / 'm')!r}: {tmp_path / 'file'} is a "
                                                  "file"),
        (["--state", ""], "--state '': name a folder"),
        (["--resume"], f"--resume: {tmp_path / 's'} holds no saved state (no state.json)"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            train(["--out", str(tmp_path / "m"), "--state", str(tmp_path / "s"), *TINY, *flags])
        assert exit_info.value.code == 2 and f"error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "s").exists() and not (tmp_path / "m").exists()


def test_init_from_a_folder_without_a_model_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        train(["--init-from", str(tmp_path), "--out", str(tmp_path / "out"), *TINY])
    assert exit_.value.code == 2
    assert f"--init-from: {tmp_path} has no config.json" in capsys.readouterr().err
