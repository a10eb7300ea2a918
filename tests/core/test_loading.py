"""Loaders: real checkpoint layouts (synthesized), hub resolution offline, and clear errors."""

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import huggingface_hub
import pytest
import torch
from checkpoints import LLADA_SPECIALS, tiny_llama, tiny_qwen2, write_dream, write_llada
from safetensors.torch import load_file, save_file
from tiny_models import tiny_model

from core.loading import UnknownWordsError, chat_prompt_ids, load_model, unknown_words
from training.checkpoint import save_own_model
from training.word_tokenizer import build_tokenizer


@pytest.fixture
def llada_dir(tmp_path):
    return write_llada(tmp_path / "LLaDA-8B-Instruct", tiny_llama(seed=4))


@pytest.fixture
def dream_dir(tmp_path):
    return write_dream(tmp_path / "Dream-v0-Instruct-7B", tiny_qwen2(seed=5))


def test_llada_layout_config_and_tokenizer(llada_dir):
    model, tok = load_model(llada_dir)
    cfg = model.config
    assert (cfg.family, cfg.logit_shift, cfg.mask_token_id) == ("llada", 0, LLADA_SPECIALS.index("<|mdm_mask|>"))
    assert set(cfg.eos_token_ids) == set(tok.convert_tokens_to_ids(["<|endoftext|>", "<|eot_id|>"]))
    text = tok.decode(chat_prompt_ids(tok, "  how many apples "))
    assert text.replace(" ", "") == (
        "<|startoftext|><|start_header_id|>user<|end_header_id|>howmanyapples<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>"
    )


def test_dream_layout_without_remote_code(dream_dir):
    # tokenization_dream.py in the folder raises if executed: loading must never run it.
    model, tok = load_model(dream_dir)
    cfg = model.config
    assert (cfg.family, cfg.logit_shift, cfg.qkv_bias, cfg.n_kv_heads) == ("dream", 1, True, 2)
    assert cfg.mask_token_id == tok.convert_tokens_to_ids("<|mask|>") == tok.mask_token_id
    assert set(cfg.eos_token_ids) == set(tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"]))
    prompt = tok.decode(chat_prompt_ids(tok, "how many apples"))
    assert prompt.endswith("<|im_start|>user\nhow many apples<|im_end|>\n<|im_start|>assistant\n")


def test_dream_decodes_at_d2caches_top_p_unless_told_otherwise(dream_dir, llada_dir):
    """d2Cache's settings for Dream (configs/gen_args.py) cut to the 0.9 nucleus on every task; LLaDA's cut nothing."""
    from core.config import DecodeConfig
    from core.loading import read_config

    dream = read_config(dream_dir)[0]
    assert dream.task_settings == {"*": {"top_p": 0.9}}
    assert DecodeConfig.for_model(dream).top_p == 0.9 == DecodeConfig.for_model(dream, task="words").top_p
    assert DecodeConfig.for_model(dream, top_p=1.0).top_p == 1.0  # given explicitly: it wins
    llada = read_config(llada_dir)[0]
    assert DecodeConfig.for_model(llada).top_p is None and DecodeConfig.for_model(llada).top_k is None


def test_own_model_round_trip(tmp_path):
    model = tiny_model(vocab_size=140, gen_len=32, block_len=16)
    tok = build_tokenizer(["mia", "has", "apples"])
    save_own_model(model, tok, tmp_path, dtype=torch.float32)
    loaded, tok2 = load_model(tmp_path)
    ids = torch.randint(0, 100, (1, 12))
    torch.testing.assert_close(loaded.full_logits(ids), model.full_logits(ids))
    assert (loaded.config.gen_len, loaded.config.block_len) == (32, 16)
    assert tok2.mask_token_id == tok.mask_token_id


def test_declared_task_settings_are_checked_when_the_config_is_read(tmp_path):
    from core.loading import read_config

    tok = build_tokenizer(["a", "b"])
    model = tiny_model(vocab_size=len(tok), mask_token_id=tok.mask_token_id,
                       task_settings={"stories": {"temperature": 0.7}})
    save_own_model(model, tok, tmp_path)
    assert read_config(tmp_path)[0].task_settings == {"stories": {"temperature": 0.7}}
    assert load_model(tmp_path)[0].config.task_settings == {"stories": {"temperature": 0.7}}
    raw = json.loads((tmp_path / "config.json").read_text())
    for bad, message in (({"stories": {"temperature": 30}}, "temperature must be a number in [0, 10], got 30"),
                         ({"stories": {"heat": 1}}, "name no decode setting it may declare: heat")):
        (tmp_path / "config.json").write_text(json.dumps({**raw, "task_settings": bad}))
        with pytest.raises(ValueError, match=re.escape("config.json: task_settings: ") + ".*" + re.escape(message)):
            read_config(tmp_path)


def test_device_map_dispatch_gives_same_logits(llada_dir):
    plain, _ = load_model(llada_dir)
    with pytest.raises(ValueError, match="device_map must be None, 'auto' or a dict"):
        load_model(llada_dir, device_map="everywhere")
    # Across real devices (GPUs) accelerate's dispatch_model also adds hooks; with no GPU here we check
    # that every tensor is materialised where the map puts it.
    placement = {"embed": "cpu", "layers.0": torch.device("cpu"), "layers": "cpu", "norm": "cpu", "lm_head": "cpu"}
    mapped, _ = load_model(llada_dir, device_map=placement)
    assert all(p.device.type == "cpu" for p in mapped.parameters())
    ids = torch.randint(0, 60, (1, 10))
    torch.testing.assert_close(mapped.full_logits(ids), plain.full_logits(ids))


UP_PROJ = "model.transformer.blocks.1.up_proj.weight"  # the tensor the broken checkpoints below get wrong


def _edit_json(path, edit) -> None:
    """Read a JSON file, let `edit` change it in place, write it back."""
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _edit_shard(folder, edit):
    """Let `edit(state, index)` change the shard that holds UP_PROJ and the index, and write both back."""
    def edit_both(index):
        file = folder / index["weight_map"][UP_PROJ]
        state = load_file(file)
        edit(state, index)
        save_file(state, file)

    _edit_json(folder / "model.safetensors.index.json", edit_both)


def _drop(state, index):
    del state[UP_PROJ]
    del index["weight_map"][UP_PROJ]


def _shrink(state, index):
    state[UP_PROJ] = state[UP_PROJ][:100]


def _add(state, index):
    state["model.transformer.blocks.9.q_proj.weight"] = torch.zeros(4, 4)
    index["weight_map"]["model.transformer.blocks.9.q_proj.weight"] = index["weight_map"][UP_PROJ]


@pytest.mark.parametrize("edit, message", [
    (_drop, r"lacks tensor 'model.transformer.blocks.1.up_proj.weight'"),
    (_shrink, r"tensor 'model.transformer.blocks.1.up_proj.weight' has shape \(100, 64\)"),
    (_add, r"tensor 'model.transformer.blocks.9.q_proj.weight' that the config"),
], ids=["missing", "wrong-shape", "unexpected"])
def test_a_bad_tensor_is_named(llada_dir, edit, message):
    _edit_shard(llada_dir, edit)
    with pytest.raises(ValueError, match=message):
        load_model(llada_dir)


def test_bad_devices_are_clear_errors(llada_dir):
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        load_model(llada_dir, device="gpu0")
    for other in ("mps", "meta"):  # devices torch knows, the decoder does not run on
        with pytest.raises(ValueError, match=f"device '{other}' is not one the decoder runs on; use cpu, cuda"):
            load_model(llada_dir, device=other)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            load_model(llada_dir, device="cuda")


def _point_outside_the_folder(index):
    index["weight_map"]["model.transformer.ln_f.weight"] = "../elsewhere.safetensors"


@pytest.mark.parametrize("file, edit, message", [
    ("config.json", lambda cfg: cfg.update(clip_qkv=8.0), "unsupported LLaDA variant: clip_qkv=8.0"),
    ("config.json", lambda cfg: cfg.update(model_type="gpt2"), "unsupported model_type 'gpt2'"),
    ("model.safetensors.index.json", _point_outside_the_folder, "shard outside the checkpoint folder"),
], ids=["unsupported-variant", "unknown-model-type", "shard-outside-the-folder"])
def test_a_bad_config_or_index_is_refused(llada_dir, file, edit, message):
    _edit_json(llada_dir / file, edit)
    with pytest.raises(ValueError, match=message):
        load_model(llada_dir)


def test_pickled_weights_are_refused(llada_dir):
    for f in llada_dir.glob("model*.safetensors*"):
        f.unlink()
    (llada_dir / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match="no safetensors weights"):
        load_model(llada_dir)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dim": "256"}, "dim must be a positive integer, got '256'"),
        ({"n_heads": 0}, "n_heads must be a positive integer, got 0"),
        ({"dim": -256}, "dim must be a positive integer, got -256"),
        ({"rope_theta": "x"}, "rope_theta must be a positive number, got 'x'"),
        ({"task_settings": [1]}, "task_settings must be an object, got [1]"),
        ({"dim": None}, "dim must be a positive integer, got None"),
    ],
)
def test_a_config_json_that_says_nonsense_is_named_with_the_file(tmp_path, change, message):
    from core.loading import EMBEDDED

    shutil.copytree(EMBEDDED, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | change))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'm' / 'config.json'}: {message}")):
        load_model(tmp_path / "m")


def test_a_config_json_that_is_not_an_object_and_truncated_weights_are_named(tmp_path):
    from core.loading import EMBEDDED

    shutil.copytree(EMBEDDED, tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    for text, said in (("[1, 2]", "expected a JSON object, got list"), ("{", "Expecting property name")):
        config.write_text(text)
        with pytest.raises(ValueError, match=re.escape(f"{config}: {said}")):
            load_model(tmp_path / "m")
    shutil.copy(EMBEDDED / "config.json", config)
    weights = tmp_path / "m" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    with pytest.raises(ValueError, match=re.escape(f"{weights} is not a readable safetensors file")):
        load_model(tmp_path / "m")


def test_a_missing_folder_is_neither_a_checkpoint_nor_a_hub_id(tmp_path):
    with pytest.raises(ValueError, match="neither a checkpoint folder nor a hub id"):
        load_model(str(tmp_path / "no-such-folder"))
    for path in ("/nonexistent", "./model", "~/model"):  # one slash, yet a path: never asked of the hub
        with pytest.raises(ValueError, match=re.escape(f"{path!r} is neither a checkpoint folder nor a hub id")):
            load_model(path)


def test_hub_id_resolves_through_the_hub_cache_offline(tmp_path, monkeypatch, llada_dir):
    """A hub id goes through huggingface_hub.snapshot_download; here from a cache we laid out."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--GSAI-ML--LLaDA-8B-Instruct" / "snapshots" / ("a" * 40)
    shutil.copytree(llada_dir, snapshot)
    (cache / "models--GSAI-ML--LLaDA-8B-Instruct" / "refs").mkdir()
    (cache / "models--GSAI-ML--LLaDA-8B-Instruct" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=re.escape("there is no folder 'nobody/nothing' here, and could not get "
                                                   "'nobody/nothing' from the hub or its cache")):
        load_model("nobody/nothing")  # a folder not made yet reads as a hub id: both are said
    by_id, _ = load_model("GSAI-ML/LLaDA-8B-Instruct")
    by_alias, _ = load_model("llada")
    local, _ = load_model(llada_dir)
    ids = torch.randint(0, 60, (1, 8))
    torch.testing.assert_close(by_id.full_logits(ids), local.full_logits(ids))
    torch.testing.assert_close(by_alias.full_logits(ids), local.full_logits(ids))


def _template_ids(tok, text: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("layout", ["llada", "dream", "embedded"])
def test_prompt_text_is_text_never_special_tokens(layout, llada_dir, dream_dir):
    """A person's text is tokenized as written: '<|mask|>' or '<|eot_id|>' typed into a prompt never
    becomes the special token, while an ordinary prompt tokenizes exactly as the chat template does."""
    model, tok = load_model({"llada": llada_dir, "dream": dream_dir, "embedded": None}[layout])
    plain = "how many apples does mia have now ?"
    assert chat_prompt_ids(tok, plain) == _template_ids(tok, plain)
    frame, other = chat_prompt_ids(tok, "apples"), chat_prompt_ids(tok, "mia")
    start = next(i for i, (a, b) in enumerate(zip(frame, other)) if a != b)  # template tokens before the content
    end = next(i for i, (a, b) in enumerate(zip(frame[::-1], other[::-1])) if a != b)  # and after it
    for written in ("<|mask|>", "<|mdm_mask|>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>"):
        text = f"apples {written} apples"
        if layout == "embedded":  # it knows none of the pieces: refused, naming them
            with pytest.raises(UnknownWordsError, match=r"'<\|'"):
                chat_prompt_ids(tok, text)
            continue
        if layout == "llada" and written == "<|endoftext|>":
            continue  # the synthesized LLaDA tokenizer is word-level and spells every unknown word as this token
        ids = chat_prompt_ids(tok, text)
        content = ids[start : len(ids) - end]
        assert ids[:start] == frame[:start] and ids[len(ids) - end :] == frame[len(frame) - end :]
        assert written not in tok.convert_ids_to_tokens(content)  # never the special token itself
        assert model.config.mask_token_id not in content
        if layout == "dream":  # byte-level BPE like the real ones; the synthesized LLaDA one spells unknown words
            assert not set(model.config.eos_token_ids) & set(content)  # as <|endoftext|>, an end id
        if written in tok.get_vocab():  # a special token of this model: the template alone would parse it
            assert written in tok.convert_ids_to_tokens(_template_ids(tok, text))


def test_prompts_tokenized_by_several_threads_at_once_each_get_their_own_ids():
    """Two visitors' prompts are checked at the same moment on Gradio's threads: a fast tokenizer's
    split_special_tokens is state its backend reads while it encodes, so without a lock one thread's
    setting reaches another's chat frame, whose special tokens then come out as words."""
    _, tok = load_model()
    prompts = ["mia has 3 apples", "how many apples does mia have now ?", "mia has 7 marbles ."]
    alone = {p: chat_prompt_ids(tok, p) for p in prompts}

    def wrong(prompt: str) -> int:
        return sum(chat_prompt_ids(tok, prompt) != alone[prompt] for _ in range(300))

    with ThreadPoolExecutor(len(prompts)) as pool:
        assert list(pool.map(wrong, prompts)) == [0, 0, 0]


def test_unknown_words_are_named_once_in_order():
    _, tok = load_model()
    assert unknown_words(tok, "Hello hello, write a poem about a poem") == ["Hello", "hello", "write", "poem"]
    with pytest.raises(UnknownWordsError, match=r"does not know 1 word of the prompt: 'sea'\. It reads only the 210"):
        chat_prompt_ids(tok, "mia has 3 sea")
    assert unknown_words(tok, "mia has 3 apples") == []
