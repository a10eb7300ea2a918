"""A random model of LLaDA's full shape in LLaDA-8B-Instruct's file layout, with a byte-level tokenizer
trained on the app's own prompts: the folder the app's --model flag is given."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from core.families import FAMILIES
from core.loading import part_shapes
from core.model import DiffusionTransformer


def write_llada_layout(model: DiffusionTransformer, folder: Path, tokenizer) -> None:
    """`model`'s weights in LLaDA-8B-Instruct's file layout (sharded safetensors, its config keys),
    with the embedded tokenizer: what the app's --model flag is given."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    params = dict(model.named_parameters())
    weight_map, shard, size, n = {}, {}, 0, 0

    def flush() -> None:
        nonlocal shard, size, n
        if shard:
            n += 1
            save_file(shard, folder / f"model-{n:05d}.safetensors", metadata={"format": "pt"})
            weight_map.update({name: f"model-{n:05d}.safetensors" for name in shard})
            shard, size = {}, 0

    for ours, parts in FAMILIES["llada"].sources(cfg).items():
        value = params[ours].detach()
        shapes = part_shapes(ours, len(parts), value.shape, cfg)
        for part, piece in zip(parts, value.split([s[0] for s in shapes])):
            shard[part] = piece.to("cpu", torch.bfloat16).contiguous()
            size += shard[part].numel() * 2
            if size > 4 * 2**30:
                flush()
    flush()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = {"model_type": "llada", "d_model": cfg.dim, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
              "n_kv_heads": cfg.n_kv_heads, "mlp_hidden_size": cfg.ffn_dim, "embedding_size": cfg.vocab_size,
              "vocab_size": cfg.vocab_size, "rope_theta": cfg.rope_theta, "max_sequence_length": cfg.max_seq_len,
              "mask_token_id": cfg.mask_token_id, "eos_token_id": tokenizer.eos_token_id, "block_type": "llama",
              "layer_norm_type": "rms", "activation_type": "silu", "rope": True, "weight_tying": False}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tokenizer.save_pretrained(folder)


def prose_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer trained here on the app's own prompts, in LLaDA's tokenizer layout (its
    special tokens and chat template): it reads any text, and its long examples take about as many
    tokens as with a real 126k-token vocabulary. (LLaDA's own tokenizer cannot be downloaded here.)"""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from app.serving.examples import CHAT_EXAMPLES
    from app.serving.long_prompts import LONG_PROMPTS

    specials = ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator([p.text for p in LONG_PROMPTS] + list(CHAT_EXAMPLES), trainer)
    template = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                "{{ m['content'] }}<|eot_id|>{% endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n")
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|startoftext|>", eos_token="<|eot_id|>",
                                   pad_token="<|endoftext|>", chat_template=template)
