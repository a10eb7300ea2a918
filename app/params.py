"""What a visitor may ask for: every control's bounds, and validation of a run's raw inputs.

The UI sliders use these bounds, and the handler checks them again, because the HTTP API accepts any
value a client sends (the sliders pass it on unchecked: app/controls.py). Nothing is clamped or
rounded silently: a bad value is a ValueError whose message names the control and its range, and
the UI shows it as is. EntropyCache's own controls come from its declared parameters
(core/policies/params.py); the decode controls are the app's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from core.config import DEFAULT_BLOCK_LEN, DEFAULT_GEN_LEN
from core.decoder import DecodeConfig
from core.policies import POLICIES, CachePolicy, Param, make_policy

MAX_PROMPT_CHARS = 2000
OURS = "entropy"  # the policy of the right-hand panel; the left-hand one is the visitor's pick
DEFAULT_COMPARED = "none"


@dataclass(frozen=True)
class Bound:
    label: str
    low: float
    high: float
    default: float
    integer: bool = False
    info: str = ""

    @property
    def range(self) -> str:
        return f"from {number_text(self.low)} to {number_text(self.high)}"

    def allowed(self) -> str:
        """The allowed values, in words: 'a whole number from 0 to 64'."""
        return f"{'a whole number' if self.integer else 'a number'} {self.range}"


def number_text(value: float) -> str:
    """A number as a visitor would write it: 2147483647 in full (not 2.14748e+09), 0.5 as 0.5."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**63 else f"{value:g}"


def _declared(p: Param) -> Bound:
    """A control for one of EntropyCache's parameters: label, help, slider range and default as core declares them."""
    low, high = p.slider_range
    return Bound(f"{p.name} ({POLICIES[OURS].__name__})", low, high, p.default, integer=p.kind is int, info=p.help)


BOUNDS: dict[str, Bound] = {
    **{p.name: _declared(p) for p in POLICIES[OURS].parameters},  # tau, k
    "gen_len": Bound("gen length", 1, 512, DEFAULT_GEN_LEN, integer=True, info="tokens generated"),
    "block_len": Bound("block length", 1, 512, DEFAULT_BLOCK_LEN, integer=True, info="must divide gen length"),
    "steps": Bound("steps", 0, 512, 0, integer=True, info="0: one token per step; must be 0 with a threshold"),
    "threshold": Bound("parallel-decoding threshold", 0.0, 1.0, 0.0, info="0: off; else unmask all above it"),
    "temperature": Bound("temperature", 0.0, 2.0, 0.0, info="0: greedy"),
    "seed": Bound("seed", 0, 2**31 - 1, 0, integer=True),
}


def compared_policies() -> list[str]:
    """Every registered policy but ours, 'none' (the exact baseline) first."""
    rest = sorted(name for name in POLICIES if name not in (OURS, DEFAULT_COMPARED))
    return [DEFAULT_COMPARED, *rest] if DEFAULT_COMPARED in POLICIES else rest


@dataclass(frozen=True)
class RunParams:
    prompt: str
    model: str
    policy: str  # the compared side's policy
    tau: float
    k: int
    gen_len: int
    block_len: int
    steps: int  # 0: one token per step
    threshold: float  # 0: off
    temperature: float
    seed: int

    def decode_config(self) -> DecodeConfig:
        return DecodeConfig(
            gen_len=self.gen_len,
            block_len=self.block_len,
            steps=self.steps or None,
            threshold=self.threshold or None,
            temperature=self.temperature,
            seed=self.seed,
        )

    def make_policies(self) -> tuple[CachePolicy, CachePolicy]:
        """(compared, ours): fresh objects, since policies keep per-decode state."""
        return make_policy(self.policy), make_policy(OURS, tau=self.tau, k=self.k)

    def to_dict(self) -> dict:
        return asdict(self)


def check_number(name: str, value: object) -> float | int:
    """The value of control `name` if it is a finite number inside its bounds, else ValueError naming
    the control and what it allows."""
    b = BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        whole = " (a whole one)" if b.integer else ""
        raise ValueError(f"{b.label} must be a number {b.range}{whole}, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{b.label} must be a finite number {b.range}, got {value!r}")
    if b.integer and not float(value).is_integer():
        raise ValueError(f"{b.label} must be a whole number {b.range}, got {value!r}")
    if not b.low <= value <= b.high:
        low, high, got = number_text(b.low), number_text(b.high), number_text(value)
        raise ValueError(f"{b.label} must be between {low} and {high}, got {got}")
    return int(value) if b.integer else float(value)


def check_prompt(prompt: object) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("Please enter a prompt: it is empty.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt)} characters long; the limit is {MAX_PROMPT_CHARS}.")
    return prompt.strip()


def parse_params(
    prompt: object,
    model: object,
    policy: object,
    *,
    models: list[str],
    **numbers: object,
) -> RunParams:
    """Validate one run's raw inputs (as the UI or an API client sent them) into RunParams."""
    text = check_prompt(prompt)
    if model not in models:
        raise ValueError(f"Unknown model {model!r}; choose one of: {', '.join(models)}.")
    if policy not in compared_policies():
        raise ValueError(f"Unknown policy {policy!r}; choose one of: {', '.join(compared_policies())}.")
    missing = sorted(set(BOUNDS) - set(numbers))
    extra = sorted(set(numbers) - set(BOUNDS))
    if missing or extra:
        raise ValueError(f"bad controls: missing {missing}, unknown {extra}")
    values = {name: check_number(name, numbers[name]) for name in BOUNDS}
    params = RunParams(prompt=text, model=str(model), policy=str(policy), **values)
    _check_shape(params)
    return params


def _check_shape(p: RunParams) -> None:
    """The relations between controls. core's DecodeConfig.validate is the one judge; only the
    steps/threshold clash is caught first, to tell the visitor which slider to move."""
    if p.steps and p.threshold:
        raise ValueError(
            f"Set steps to 0 or the parallel-decoding threshold to 0 (got steps {p.steps}, threshold "
            f"{p.threshold:g}): with a threshold each block is decoded until it is done, so steps has no meaning."
        )
    try:
        p.decode_config().validate()
    except ValueError as e:
        raise ValueError(f"These controls do not fit together: {e}.") from None
