"""The two configurations: the model's (ModelConfig) and a decode's (DecodeConfig).

ModelConfig holds the few numbers that define a LLaMA-family bidirectional transformer. One dataclass
serves LLaDA, Dream and the project's own model; the loaders translate each checkpoint's config.json
into it. Decoding semantics that differ between families (the mask id, the end-of-text ids, Dream's
one-position logit shift) live here too, so the decoder never branches on the family name; so do the
decode defaults a model declares, which DecodeConfig.for_model applies.

DecodeConfig is how one prompt is decoded: the settings a person chooses, each declared once as a
core.Param, and how its passes run (graphs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from core.params import Param
from core.refusal import check_choice
from core.sampling import ALGS, transfer_schedule
from core.schedules import SCHEDULES, dream_schedule

# How a checkpoint that does not say otherwise is decoded: LLaDA's defaults (gen 128, block 32).
DEFAULT_GEN_LEN = 128
DEFAULT_BLOCK_LEN = 32
ALL_TASKS = "*"  # task_settings' key for settings of every decode of the model, of a task or not
GRAPH_MODES = ("auto", "on", "off")
GRAPHS_HELP = ("fixed-shape cached passes replayed from CUDA graphs: auto (on a CUDA GPU), on (on a CPU: the "
               "same padded passes, eagerly), off (every pass eagerly over its exact rows)")


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
    # source of the CLI's, the bench's and the app's defaults (DecodeConfig.for_model).
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


def check_graphs(mode: object) -> str:
    """`mode` if it is one of GRAPH_MODES (how a decode's passes run, core/passes.py), else a ValueError
    that says what is."""
    return check_choice(mode, GRAPH_MODES, "graphs")


def _setting(kind: type, default: int | float | str | None, **declared: object) -> Any:
    """A DecodeConfig field that a person sets, declared as a core.Param named after the field
    (DecodeConfig.parameters): type, default, bounds, help, label and the range a UI offers."""
    return field(default=default, metadata={"param": dict(kind=kind, default=default, **declared)})


@dataclass(frozen=True)
class DecodeConfig:
    """How one prompt is decoded. The settings a person chooses are declared like a policy's
    parameters (`parameters`, core/params.py), and a config checks itself when it is made,
    as a policy does: one that exists is valid."""

    gen_len: int = _setting(int, 64, low=1, high=8192, ui=(1, 512), label="gen length", help="tokens generated")
    block_len: int = _setting(int, 32, low=1, ui=(1, 512), label="block length",
                              help="tokens decoded together, left to right; must divide gen length")
    steps: int | None = _setting(int, None, low=1, ui=(1, 512), unset="one token per step",
                                 help="denoising steps in all, a multiple of the blocks; not with a threshold")
    threshold: float | None = _setting(float, None, low=0.0, high=1.0, low_open=True, unset="off",
                                       label="parallel-decoding threshold",
                                       help="Fast-dLLM's parallel decoding: unmask every token above this confidence")
    temperature: float = _setting(float, 0.0, low=0.0, high=10.0, ui=(0.0, 2.0), help="sampling temperature; 0: greedy")
    seed: int = _setting(int, 0, ui=(0, 2**31 - 1), help="the sampling generator's seed")
    top_p: float | None = _setting(
        float, None, low=0.0, high=1.0, low_open=True, unset="off", label="top-p",
        help="nucleus: candidates and confidences from the fewest tokens holding this share of the probability, "
        "as d2Cache's sampler cuts them (its Dream settings: 0.9; 1: no cut)")
    top_k: int | None = _setting(int, None, low=1, ui=(1, 1024), unset="off", label="top-k",
                                 help="candidates and confidences from the k most probable tokens, after top-p")
    alg: str = _setting(str, ALGS[0], choices=ALGS, label="ranking",
                        help="which masks are unmasked first: by probability (maskgit_plus), by the margin between "
                        "the two most probable tokens (topk_margin), by negative entropy (entropy); Dream's names")
    schedule: str = _setting(str, SCHEDULES[0], choices=SCHEDULES,
                             help="block: the paper's, blocks left to right, a block's tokens spread evenly over its "
                             "steps; dream: Dream's diffusion_generate, the whole response as one block, its steps")
    stop_at_eos: bool = True
    graphs: str = "auto"  # core/passes.py: fixed-shape passes replayed from CUDA graphs (auto: on a CUDA GPU)

    parameters: ClassVar[tuple[Param, ...]]  # the declared fields, in order (set below the class)

    def __post_init__(self) -> None:
        for p in self.parameters:  # each as its declared type (an int temperature is a float)
            object.__setattr__(self, p.name, p.check(getattr(self, p.name)))
        check_graphs(self.graphs)  # how the passes run, not what they compute: not among the declared settings
        self._check_relations()

    def _check_relations(self) -> None:
        if self.block_len > self.gen_len:
            raise ValueError(f"block_len must be an integer in [1, gen_len={self.gen_len}], got {self.block_len!r}")
        if self.gen_len % self.block_len:
            raise ValueError(f"gen_len {self.gen_len} is not a multiple of block_len {self.block_len}")
        n_blocks = self.n_blocks
        if self.threshold is not None and self.alg != ALGS[0]:
            raise ValueError(f"a threshold reads the candidate's probability: it ranks by {ALGS[0]}, not {self.alg}")
        if self.threshold is not None and self.schedule == "dream":
            raise ValueError("the dream schedule unmasks as many tokens as its step says: it takes no threshold")
        if self.steps is not None:
            if not n_blocks <= self.steps <= self.gen_len:
                raise ValueError(f"steps must be an integer in [{n_blocks}, {self.gen_len}], got {self.steps!r}")
            if self.steps % n_blocks:
                raise ValueError(f"steps {self.steps} must be a multiple of the number of blocks ({n_blocks})")
        if self.threshold is not None and self.steps is not None:
            raise ValueError("steps and threshold cannot both be set: with a threshold each block runs until done")

    @classmethod
    def for_model(
        cls, model_config: ModelConfig, gen_len: int | None = None, block_len: int | None = None,
        task: str | None = None, **settings,
    ) -> DecodeConfig:
        """A config whose gen and block length default (when None) to the model's own decode defaults
        (ModelConfig.gen_len, block_len), and whose other settings to what the model declares for every
        decode (ModelConfig.task_settings[ALL_TASKS]) and, for one of its own tasks, for that task;
        `settings` are the other fields, given explicitly. The CLI, bench and app use it."""
        every = model_config.task_settings.get(ALL_TASKS, {})
        declared = {**every, **(model_config.task_settings.get(task, {}) if task else {})}
        # the lengths are the model's own (ModelConfig.gen_len, block_len), whatever the task
        unknown = sorted(set(declared) - ({f.name for f in fields(cls)} - {"gen_len", "block_len"}))
        if unknown:
            raise ValueError(f"the model's task_settings for {task!r} name no decode setting it may declare: "
                             f"{', '.join(unknown)}")
        return cls(
            gen_len=model_config.gen_len if gen_len is None else gen_len,
            block_len=model_config.block_len if block_len is None else block_len,
            **{**declared, **settings},
        )

    def one_token_per_step(self) -> DecodeConfig:
        """This decode without parallel decoding: no threshold, no step count, one token per step, in
        blocks (the dream schedule's steps are not one token each). With the policy `none` it is the
        paper's vanilla decoder, the baseline of its speedups."""
        return replace(self, steps=None, threshold=None, schedule=SCHEDULES[0])

    @property
    def parallel(self) -> bool:
        """A step may unmask more than one token: a threshold below 1, or fewer steps than tokens, in blocks
        of more than one token. (A threshold of 1 unmasks only the most confident token: no confidence is
        above 1.)"""
        if self.block_len == 1:
            return False
        if self.threshold is not None:
            return self.threshold < 1
        return max(self.transfers()) > 1

    @property
    def max_steps(self) -> int:
        """The most steps the decode takes: `steps`, else gen_len (one token a step; with a threshold, at
        least one a step; with the dream schedule, gen_len steps of its formula)."""
        return self.steps or self.gen_len

    @property
    def n_blocks(self) -> int:
        """The blocks decoded left to right: the dream schedule decodes the whole response as one."""
        return 1 if self.schedule == "dream" else self.gen_len // self.block_len

    @property
    def block_size(self) -> int:
        """The positions of a decoded block: block_len, or the whole response with the dream schedule."""
        return self.gen_len // self.n_blocks

    @property
    def steps_per_block(self) -> int:
        return self.max_steps // self.n_blocks

    def transfers(self) -> list[int]:
        """Tokens to unmask at each step of a block (None: a threshold decides)."""
        if self.schedule == "dream":
            return dream_schedule(self.gen_len, self.max_steps)
        return transfer_schedule(self.block_size, self.steps_per_block)


DecodeConfig.parameters = tuple(Param(f.name, **f.metadata["param"]) for f in fields(DecodeConfig)
                                if "param" in f.metadata)
