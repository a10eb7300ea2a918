"""Checkpoint layouts: how each family's config.json and tensor names map onto ours.

Each family turns its config.json into a ModelConfig and names, for every parameter of our model,
the checkpoint tensors it is made of (q/k/v are concatenated into wqkv, gate/up into w13).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.config import ALL_TASKS, ModelConfig

OWN_MODEL_TYPE = "entropycache-dlm"  # config.json's model_type of the project's own model


@dataclass(frozen=True)
class Family:
    name: str
    config: Callable[[dict, list[int]], ModelConfig]  # (config.json, end-of-text ids from the tokenizer)
    sources: Callable[[ModelConfig], dict[str, list[str]]]
    end_tokens: tuple[str, ...]  # token strings that end a response, looked up in the tokenizer
    tokenizer_class: str = "AutoTokenizer"  # a transformers class: never remote code


def _require(d: dict, key: str, family: str):
    if key not in d:
        raise ValueError(f"{family} config.json lacks {key!r}")
    return d[key]


def _llada_config(d: dict, end_ids: list[int]) -> ModelConfig:
    checks = {"block_type": "llama", "layer_norm_type": "rms", "activation_type": "silu"}
    for key, want in checks.items():
        if d.get(key, want) != want:
            raise ValueError(f"unsupported LLaDA variant: {key}={d[key]!r} (only {want!r})")
    if d.get("alibi") or d.get("rope") is False or d.get("attention_layer_norm"):
        raise ValueError("unsupported LLaDA variant: needs rope, no alibi, no q/k layer norm")
    for key in ("scale_logits", "clip_qkv", "input_emb_norm"):
        if d.get(key):
            raise ValueError(f"unsupported LLaDA variant: {key}={d[key]!r}")
    dim = _require(d, "d_model", "LLaDA")
    return ModelConfig(
        vocab_size=d.get("embedding_size") or _require(d, "vocab_size", "LLaDA"),
        dim=dim,
        n_layers=_require(d, "n_layers", "LLaDA"),
        n_heads=_require(d, "n_heads", "LLaDA"),
        n_kv_heads=d.get("n_kv_heads") or d["n_heads"],
        ffn_dim=d.get("mlp_hidden_size") or d.get("mlp_ratio", 4) * dim,
        rope_theta=d.get("rope_theta", 10000.0),
        norm_eps=d.get("rms_norm_eps", 1e-5),
        qkv_bias=bool(d.get("include_qkv_bias") or d.get("include_bias")),
        tie_embeddings=bool(d.get("weight_tying", False)),
        max_seq_len=d.get("max_sequence_length", 4096),
        mask_token_id=d.get("mask_token_id", 126336),
        eos_token_ids=tuple(sorted({d["eos_token_id"], *end_ids} if "eos_token_id" in d else set(end_ids))),
        logit_shift=0,
        family="llada",
    )


@dataclass(frozen=True)
class _TensorNames:
    """Where a family's checkpoint keeps each of our parameters: whole-model tensors by name, a layer's
    under `layer` (formatted with the layer's index), each a name without its ".weight"/".bias"."""

    embed: str
    norm: str
    lm_head: str
    layer: str
    attn_norm: str
    qkv: str  # formatted with n = "q", "k", "v"
    attn_out: str
    ffn_norm: str
    gate: str
    up: str
    down: str

    def sources(self, cfg: ModelConfig) -> dict[str, list[str]]:
        """Each of our parameters with the checkpoint tensors it is made of (q, k, v concatenated into
        wqkv, gate and up into w13); lm_head only where the embeddings are not tied, biases where
        the config has them."""
        out = {"embed.weight": [self.embed + ".weight"], "norm.weight": [self.norm + ".weight"]}
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = [self.lm_head + ".weight"]
        for i in range(cfg.n_layers):
            b, o = self.layer.format(i=i), f"layers.{i}."
            out[o + "attn_norm.weight"] = [b + self.attn_norm + ".weight"]
            out[o + "attn.wqkv.weight"] = [b + self.qkv.format(n=n) + ".weight" for n in "qkv"]
            if cfg.qkv_bias:
                out[o + "attn.wqkv.bias"] = [b + self.qkv.format(n=n) + ".bias" for n in "qkv"]
            out[o + "attn.wo.weight"] = [b + self.attn_out + ".weight"]
            out[o + "ffn_norm.weight"] = [b + self.ffn_norm + ".weight"]
            out[o + "ffn.w13.weight"] = [b + self.gate + ".weight", b + self.up + ".weight"]
            out[o + "ffn.w2.weight"] = [b + self.down + ".weight"]
        return out


_LLADA_NAMES = _TensorNames(
    embed="model.transformer.wte", norm="model.transformer.ln_f", lm_head="model.transformer.ff_out",
    layer="model.transformer.blocks.{i}.", attn_norm="attn_norm", qkv="{n}_proj", attn_out="attn_out",
    ffn_norm="ff_norm", gate="ff_proj", up="up_proj", down="ff_out",
)
_HF_NAMES = _TensorNames(  # transformers' Llama / Qwen2 names, which Dream keeps
    embed="model.embed_tokens", norm="model.norm", lm_head="lm_head",
    layer="model.layers.{i}.", attn_norm="input_layernorm", qkv="self_attn.{n}_proj", attn_out="self_attn.o_proj",
    ffn_norm="post_attention_layernorm", gate="mlp.gate_proj", up="mlp.up_proj", down="mlp.down_proj",
)


def _dream_config(d: dict, end_ids: list[int]) -> ModelConfig:
    if d.get("rope_scaling"):
        raise ValueError(f"unsupported Dream variant: rope_scaling={d['rope_scaling']!r}")
    if d.get("use_sliding_window") or d.get("hidden_act", "silu") != "silu":
        raise ValueError("unsupported Dream variant: needs silu and no sliding-window attention")
    theta = d.get("rope_theta") or (d.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    eos = d.get("eos_token_id")
    return ModelConfig(
        vocab_size=_require(d, "vocab_size", "Dream"),
        dim=_require(d, "hidden_size", "Dream"),
        n_layers=_require(d, "num_hidden_layers", "Dream"),
        n_heads=_require(d, "num_attention_heads", "Dream"),
        n_kv_heads=d.get("num_key_value_heads") or d["num_attention_heads"],
        ffn_dim=_require(d, "intermediate_size", "Dream"),
        rope_theta=theta,
        norm_eps=d.get("rms_norm_eps", 1e-6),
        qkv_bias=True,  # Qwen2 attention always has q/k/v bias
        tie_embeddings=bool(d.get("tie_word_embeddings", False)),
        max_seq_len=d.get("max_position_embeddings", 32768),
        mask_token_id=d.get("mask_token_id", 151666),
        eos_token_ids=tuple(sorted({eos, *end_ids} if eos is not None else set(end_ids))),
        logit_shift=1,
        family="dream",
        # d2Cache, the framework the EntropyCache paper ran on, decodes Dream with top_p 0.9 on every task,
        # at temperature 0 too (Kamichanw/d2Cache configs/gen_args.py, get_generation_args: "set based on
        # model", dream-base and dream-inst); given explicitly, top_p 1 cuts nothing.
        task_settings={ALL_TASKS: {"top_p": 0.9}},
    )


def _own_config(d: dict, end_ids: list[int]) -> ModelConfig:
    return ModelConfig.from_dict(d)


def _own_sources(cfg: ModelConfig) -> dict[str, list[str]]:
    from accelerate import init_empty_weights

    from core.model import DiffusionTransformer  # names are exactly our parameter names

    with init_empty_weights():
        names = [n for n, _ in DiffusionTransformer(cfg).named_parameters()]
    return {n: [n] for n in names}


FAMILIES = {
    "llada": Family("llada", _llada_config, _LLADA_NAMES.sources, ("<|eot_id|>", "<|endoftext|>"),
                    "PreTrainedTokenizerFast"),
    "Dream": Family("dream", _dream_config, _HF_NAMES.sources, ("<|im_end|>", "<|endoftext|>"), "Qwen2Tokenizer"),
    OWN_MODEL_TYPE: Family("own", _own_config, _own_sources, (), "PreTrainedTokenizerFast"),
}


def family_for(config: dict) -> Family:
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(FAMILIES)}")
    return FAMILIES[model_type]
