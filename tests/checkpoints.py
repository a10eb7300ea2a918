"""Synthesized checkpoints in the real LLaDA-8B-Instruct and Dream-v0-Instruct-7B file layouts.

Small random weights, but the real config.json keys, tensor names, sharded index and tokenizer
files. The weights come from transformers' own Llama / Qwen2 models, renamed here by hand (not by
core.families), so loading them and matching transformers' logits checks our mapping independently.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

WORDS = "user assistant system hello world how many apples are there the answer is one two three four five".split()
LLADA_SPECIALS = [
    "<|startoftext|>",
    "<|endoftext|>",
    "<|mdm_mask|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
LLADA_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
)
DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
DREAM_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCAB = 128  # embedding rows; real checkpoints also pad the embedding beyond the tokenizer


def _shard(state: dict[str, torch.Tensor], folder: Path, n_shards: int = 2) -> None:
    """Write state as model-0000i-of-0000n.safetensors plus model.safetensors.index.json."""
    names = sorted(state)
    weight_map, total = {}, 0
    for i in range(n_shards):
        file = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: state[n].contiguous() for n in names[i::n_shards]}
        save_file(part, folder / file, metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
        total += sum(t.numel() * t.element_size() for t in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


# The size both tiny models share; each adds its family's own settings.
_TINY_SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_attention_heads=4,
                   max_position_embeddings=256, tie_word_embeddings=False)


def tiny_llama(seed: int = 0, layers: int = 2, kv_heads: int = 4) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        **_TINY_SHAPE,
        num_hidden_layers=layers,
        num_key_value_heads=kv_heads,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        attention_bias=False,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_qwen2(seed: int = 0, layers: int = 2) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        **_TINY_SHAPE,
        num_hidden_layers=layers,
        num_key_value_heads=2,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # HF initialises biases to zero; make them count
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def _word_tokenizer(specials: list[str]) -> Tokenizer:
    vocab = {t: i for i, t in enumerate(specials + WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token=specials[1]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _added_tokens_decoder(ids: dict[str, int]) -> dict[str, dict]:
    """tokenizer_config.json's added_tokens_decoder: each special token by its id, as both real
    checkpoints write it (special, never stripped or normalized)."""
    entry = {"special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
    return {str(i): {"content": t, **entry} for t, i in ids.items()}


def write_llada(folder: Path, hf: LlamaForCausalLM) -> Path:
    """LLaDA-8B-Instruct's layout from a transformers Llama model, written into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    c = hf.config
    rename = {
        "self_attn.q_proj": "q_proj",
        "self_attn.k_proj": "k_proj",
        "self_attn.v_proj": "v_proj",
        "self_attn.o_proj": "attn_out",
        "mlp.gate_proj": "ff_proj",
        "mlp.up_proj": "up_proj",
        "mlp.down_proj": "ff_out",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ff_norm",
    }
    state = {}
    for name, t in hf.state_dict().items():
        if name == "model.embed_tokens.weight":
            state["model.transformer.wte.weight"] = t
        elif name == "model.norm.weight":
            state["model.transformer.ln_f.weight"] = t
        elif name == "lm_head.weight":
            state["model.transformer.ff_out.weight"] = t
        else:
            _, _, i, rest = name.split(".", 3)
            module, param = rest.rsplit(".", 1)
            state[f"model.transformer.blocks.{i}.{rename[module]}.{param}"] = t
    _shard(state, folder)
    specials = {t: i for i, t in enumerate(LLADA_SPECIALS)}
    config = {
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
            "AutoModel": "modeling_llada.LLaDAModelLM",
        },
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": c.hidden_size,
        "embedding_dropout": 0.0,
        "embedding_size": c.vocab_size,
        "eos_token_id": specials["<|endoftext|>"],
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_cutoff_factor": None,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": specials["<|mdm_mask|>"],
        "max_sequence_length": 256,
        "mlp_hidden_size": c.intermediate_size,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": c.num_attention_heads,
        "n_kv_heads": c.num_key_value_heads,
        "n_layers": c.num_hidden_layers,
        "pad_token_id": specials["<|endoftext|>"],
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": c.rms_norm_eps,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": c.vocab_size,
        "weight_tying": False,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(
        json.dumps({"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 1, "transformers_version": "4.38.2"})
    )
    _word_tokenizer(LLADA_SPECIALS).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_bos_token": False,
                "add_eos_token": False,
                "bos_token": "<|startoftext|>",
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "chat_template": LLADA_TEMPLATE,
                "model_max_length": 1e30,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "added_tokens_decoder": _added_tokens_decoder(specials),
            }
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    )
    return folder


def write_dream(folder: Path, hf: Qwen2ForCausalLM) -> Path:
    """Dream-v0-Instruct-7B's layout (Qwen2 names) with its BPE tokenizer files and custom-class config,
    written into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    c = hf.config
    _shard(dict(hf.state_dict()), folder, n_shards=3)
    # A byte-level BPE vocabulary: single characters, then whole words through merges.
    chars = sorted(set("".join(WORDS)) | {"Ġ", "\n", "Ċ"} - {"\n"})
    vocab = {ch: i for i, ch in enumerate(chars)}
    merges = []
    for w in WORDS:
        piece = "Ġ" + w
        cur = piece[0]
        for ch in piece[1:]:
            merges.append(f"{cur} {ch}")
            cur += ch
            vocab.setdefault(cur, len(vocab))
    ids = {t: len(vocab) + i for i, t in enumerate(DREAM_SPECIALS)}
    assert max(ids.values()) < c.vocab_size
    config = {
        "architectures": ["DreamModel"],
        "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "hidden_act": "silu",
        "hidden_size": c.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": c.intermediate_size,
        "mask_token_id": ids["<|mask|>"],
        "max_position_embeddings": 256,
        "max_window_layers": c.num_hidden_layers,
        "model_type": "Dream",
        "num_attention_heads": c.num_attention_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "num_key_value_heads": c.num_key_value_heads,
        "pad_token_id": ids["<|endoftext|>"],
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.2",
        "use_cache": False,
        "use_mrope": False,
        "use_sliding_window": False,
        "vocab_size": c.vocab_size,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(dict.fromkeys(merges)) + "\n")
    (folder / "added_tokens.json").write_text(json.dumps(ids))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_prefix_space": False,
                "bos_token": None,
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "mask_token": "<|mask|>",
                "unk_token": None,
                "chat_template": DREAM_TEMPLATE,
                "errors": "replace",
                "model_max_length": 131072,
                "split_special_tokens": False,
                "tokenizer_class": "DreamTokenizer",
                "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                "added_tokens_decoder": _added_tokens_decoder(ids),
            }
        )
    )
    (folder / "tokenization_dream.py").write_text("raise RuntimeError('remote code must never run')\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "mask_token": "<|mask|>",
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            }
        )
    )
    return folder
