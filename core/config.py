"""Model configuration: the few numbers that define a LLaMA-family bidirectional transformer.

One dataclass serves LLaDA, Dream and the project's own model; the loaders translate each
checkpoint's config.json into it. Decoding semantics that differ between families (the mask id, the
end-of-text ids, Dream's one-position logit shift) live here too, so the decoder never branches on
the family name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# How a checkpoint that does not say otherwise is decoded: LLaDA's defaults (gen 128, block 32).
DEFAULT_GEN_LEN = 128
DEFAULT_BLOCK_LEN = 32
ALL_TASKS = "*"  # task_settings' key for settings of every decode of the model, of a task or not


@dataclass
class ModelConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    ffn_dim: int
    mask_token_id: int
    n_kv_heads: int | None = None  # None: as many as query heads (no grouping)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    qkv_bias: bool = False
    tie_embeddings: bool = False
    max_seq_len: int = 4096
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    # Dream was adapted from an autoregressive model: the logits for position i come out of row i-1.
    logit_shift: int = 0
    family: str = "own"
    # The response and block length this model is decoded with unless told otherwise: the one
    # source of the CLI's, the bench's and the app's defaults (core.decoder.DecodeConfig.for_model).
    gen_len: int = DEFAULT_GEN_LEN
    block_len: int = DEFAULT_BLOCK_LEN
    # Decode settings the model declares for a task of its own (evaluation/tasks), over the defaults: e.g.
    # {"stories": {"temperature": 0.7}} where greedy decoding of its stories loops; under ALL_TASKS, for
    # every decode (Dream's top_p, core/families.py). DecodeConfig.for_model applies them, a task's over
    # ALL_TASKS'; settings given explicitly win.
    task_settings: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_seq_len", "gen_len",
                     "block_len"):  # a checkpoint's config.json may say anything
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("rope_theta", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if isinstance(self.mask_token_id, bool) or not isinstance(self.mask_token_id, int):
            raise ValueError(f"mask_token_id must be an integer, got {self.mask_token_id!r}")
        if not isinstance(self.task_settings, dict):
            raise ValueError(f"task_settings must be an object, got {self.task_settings!r}")
        self.eos_token_ids = tuple(int(t) for t in self.eos_token_ids)
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")
        if (self.dim // self.n_heads) % 2:
            raise ValueError("head dimension must be even for rotary embeddings")
        if self.logit_shift not in (0, 1):
            raise ValueError(f"logit_shift must be 0 or 1, got {self.logit_shift}")
        if not (0 < self.block_len <= self.gen_len and self.gen_len % self.block_len == 0):
            raise ValueError(f"default gen_len {self.gen_len} must be a multiple of block_len {self.block_len}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} outside vocabulary of {self.vocab_size}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_dict(self) -> dict:
        d = asdict(self)
        d["eos_token_ids"] = list(self.eos_token_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})
