"""What the decoder yields: one StepEvent per denoising step, the last one with done=True.

Events are plain data (lists and floats), so the app and the bench only read them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class Totals:
    steps: int = 0
    full_steps: int = 0
    rows_computed: int = 0  # summed over steps and layers
    rows_full: int = 0  # what a full forward at every step would have computed
    compute_s: float = 0.0  # model forward + token choice + decision, on the step clock (core/device.py)
    decision_s: float = 0.0  # the policy's share: plan, observe, entropies of decoded tokens
    tokens: int = 0  # generated tokens before the first end-of-text
    capture_s: float = 0.0  # capturing CUDA graphs (core/passes.py), once per length and shape: not in compute_s

    def __iadd__(self, other: Totals) -> Totals:
        """Add another run's (or step's) totals field by field."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    @property
    def rows_fraction(self) -> float:
        return self.rows_computed / self.rows_full if self.rows_full else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.compute_s if self.compute_s else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(rows_fraction=self.rows_fraction, tokens_per_s=self.tokens_per_s)
        return d


@dataclass
class StepEvent:
    step: int
    block: int
    prompt_len: int
    tokens: list[int]  # the response, mask id where still masked
    unmasked: list[int]  # absolute positions unmasked in this step
    unmasked_tokens: list[int]
    entropies: list[float]  # entropy (nats) of each unmasked token's distribution
    max_entropy: float
    full: bool  # this step computed every row
    reason: str  # the policy's one-line explanation
    rows: list[int]  # absolute positions computed in this step
    layer_rows: list[int]  # rows computed at each layer
    compute_s: float  # forward_s + choice_s + decision_s
    decision_s: float
    totals: Totals = field(default_factory=Totals)  # running totals, including this step
    done: bool = False
    block_done: bool = False  # this step unmasked the last masked token of its block
    confidences: list[float] = field(default_factory=list)  # probability of each unmasked token when chosen
    capture_s: float = 0.0  # capturing the CUDA graphs this step was the first to need: not in compute_s
    forward_s: float | None = 0.0  # the model's pass (None: not recorded, in a trace from before it was)
    choice_s: float | None = 0.0  # the token choice: sampling, writing and reading back the tokens
    # Filled only under decode(..., before_step=evaluation.diagnostics.Probe(model)): the cache's staleness at
    # the start of the step, per layer; every position's K/V change since the start of the step before;
    # and [steps since unmasked, K/V change since last step] per unmasked token.
    drift_cos: list[float] | None = None
    drift_l2: list[float] | None = None
    volatility: list[list[float]] | None = None
    kv_change: list[float] | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["totals"] = self.totals.to_dict()
        return d
