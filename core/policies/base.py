"""What a cache policy sees and says.

The decoder asks the policy, before each step, which rows to compute (`plan`), and tells it, after
the step, what was unmasked and how uncertain it was (`observe`). A policy never touches the model
or the cache, so a new one is a small class registered by name: the decoder does not change. (A
policy that decides layer by layer, inside the forward, does so through a LayerHook in its plan.)
Positions come and go as plain Python ints: a policy does set arithmetic on a few dozen of them,
which Python does in microseconds, and only the decoder turns positions into index tensors.

A policy declares its parameters once (`parameters`, core/params.py); the base class
checks the values it is built with against them and sets each as an attribute.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from core.layerwise import LayerHook
from core.params import Param, check_params


@dataclass(frozen=True)
class StepContext:
    step: int  # global step index, from 0
    block: int  # index of the current block
    block_step: int  # step index inside the current block, from 0
    block_start: int  # absolute position of the block's first token
    block_end: int  # one past its last
    prompt_len: int
    length: int  # prompt + generation
    block_masked: tuple[int, ...]  # sorted positions still masked in the current block
    decode_order: tuple[int, ...]  # every unmasked position so far, in the order unmasked (ascending within a step)
    logit_shift: int = 0  # the model reads position i's logits at row i - logit_shift (Dream: 1)


@dataclass(frozen=True)
class Plan:
    # Positions to compute, any iterable of ints (order and repeats don't matter); None = every row
    # (a full forward). The decoder adds the rows whose logits it reads (the block's masked
    # positions; for Dream, whose logits are shifted, the row before each) and sorts them.
    rows: Iterable[int] | None
    reason: str  # one short phrase, shown to people
    # A per-layer part (core/layerwise.py): with a stream hook it chooses each layer's rows and
    # `rows` is ignored; otherwise it only reads signals while `rows` are computed at every layer.
    hook: LayerHook | None = None


@dataclass(frozen=True)
class Outcome:
    unmasked: tuple[int, ...]  # positions unmasked in this step, ascending
    entropies: tuple[float, ...]  # Shannon entropy (nats) of each one's predicted distribution


class CachePolicy:
    """Base class: every step a full forward. Subclasses override `plan` and maybe `observe`."""

    name: ClassVar[str] = "base"  # set by core.policies.register
    parameters: ClassVar[tuple[Param, ...]] = ()
    # Whether the full steps it takes beyond a block's first are decided by decoded-token entropy (the
    # bench's `by entropy` column; blank for a policy whose full steps have other reasons).
    decides_by_entropy: ClassVar[bool] = False

    def __init__(self, **params: object) -> None:
        self._values = check_params(self.name, self.parameters, params)
        for key, value in self._values.items():
            setattr(self, key, value)
        self.reset()

    def reset(self) -> None:
        """Called once before a decode starts."""

    def plan(self, ctx: StepContext) -> Plan:
        return Plan(None, "full")

    def observe(self, ctx: StepContext, outcome: Outcome) -> None:
        """Called after each step with what it unmasked."""

    def params(self) -> dict:
        """The values of the declared parameters this policy was built with."""
        return dict(self._values)

    def describe(self) -> str:
        """name(param=value, ...); a parameter chosen by name (EntropyCache's scope) only where it is not
        its default, so that the label of the common case stays as it was before it was declared."""
        at_default = {q.name for q in self.parameters if q.choices and self._values[q.name] == q.default}
        p = ", ".join(f"{k}={v}" for k, v in self.params().items() if k not in at_default)
        return f"{self.name}({p})" if p else self.name
