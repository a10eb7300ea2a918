"""What a visitor may ask for: every control's bounds, and validation of a run's raw inputs.

The UI sliders use these bounds, and the handler checks them again, because the HTTP API accepts any
value a client sends (the sliders pass it on unchecked: app/controls/panel.py). Nothing is clamped or
rounded silently: a bad value is a ValueError whose message names the control and its range, and
the UI shows it as is. EntropyCache's controls, and each compared policy's, come from the policies'
declared parameters (core/policies/params.py); the decode controls are the app's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

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


def _declared(policy: str, p: Param) -> Bound:
    """A control for a policy's parameter: label, help, slider range and default as core declares them."""
    low, high = p.slider_range
    return Bound(f"{p.name} ({POLICIES[policy].__name__})", low, high, p.default, integer=p.kind is int, info=p.help)


BOUNDS: dict[str, Bound] = {
    **{p.name: _declared(OURS, p) for p in POLICIES[OURS].parameters},  # tau, k
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


def probed_policies() -> list[str]:
    """What the Drift tab may probe: ours first, then every compared policy that keeps a cache."""
    return [OURS, *(name for name in compared_policies() if name != DEFAULT_COMPARED)]


def control_name(policy: str, param: str) -> str:
    """A compared policy's control as a Python name (the HTTP API's parameter): dllm-cache's rho is dllm_cache_rho."""
    return f"{policy.replace('-', '_')}_{param}"


# Every compared policy's own controls, by control name, in the order of compared_policies().
_PEER_PARAMS = {
    control_name(name, p.name): (name, p) for name in compared_policies() for p in POLICIES[name].parameters
}
PEER_BOUNDS: dict[str, Bound] = {control: _declared(name, p) for control, (name, p) in _PEER_PARAMS.items()}
PEER_OWNER: dict[str, tuple[str, str]] = {control: (name, p.name) for control, (name, p) in _PEER_PARAMS.items()}


@dataclass(frozen=True)
class RunParams:
    prompt: str
    model: str
    policy: str  # the picked policy: the Race's compared side, the Drift tab's probed one
    tau: float
    k: int
    gen_len: int
    block_len: int
    steps: int  # 0: one token per step
    threshold: float  # 0: off
    temperature: float
    seed: int
    compared_params: dict = field(default_factory=dict)  # the compared policy's parameters

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
        """(picked, ours): fresh objects, since policies keep per-decode state."""
        return self.picked_policy(), make_policy(OURS, tau=self.tau, k=self.k)

    def picked_policy(self) -> CachePolicy:
        """The picked policy, a fresh object: ours takes tau and k, any other its own controls."""
        if self.policy == OURS:
            return make_policy(OURS, tau=self.tau, k=self.k)
        return make_policy(self.policy, **self.compared_params)

    def to_dict(self) -> dict:
        return asdict(self)


def check_number(name: str, value: object) -> float | int:
    """The value of control `name` if it is a finite number inside its bounds, else ValueError naming
    the control and what it allows."""
    b = BOUNDS[name] if name in BOUNDS else PEER_BOUNDS[name]
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
    compared: dict | None = None,
    policies: list[str] | None = None,
    **numbers: object,
) -> RunParams:
    """Validate one run's raw inputs (as the UI or an API client sent them) into RunParams. `compared`:
    compared policies' controls by control name (PEER_BOUNDS); those sent are checked, whichever
    policy they belong to, and the chosen policy's missing ones take their defaults. `policies`: what
    `policy` may be (default: compared_policies(), the Race's)."""
    text = check_prompt(prompt)
    if model not in models:
        raise ValueError(f"Unknown model {model!r}; choose one of: {', '.join(models)}.")
    policies = compared_policies() if policies is None else policies
    if policy not in policies:
        raise ValueError(f"Unknown policy {policy!r}; choose one of: {', '.join(policies)}.")
    missing = sorted(set(BOUNDS) - set(numbers))
    extra = sorted(set(numbers) - set(BOUNDS))
    if missing or extra:
        raise ValueError(f"bad controls: missing {missing}, unknown {extra}")
    values = {name: check_number(name, numbers[name]) for name in BOUNDS}
    compared = compared or {}
    unknown = sorted(set(compared) - set(PEER_BOUNDS))
    if unknown:
        raise ValueError(f"bad controls: unknown {unknown}")
    checked = {name: check_number(name, value) for name, value in compared.items()}
    own = {param: checked.get(name, PEER_BOUNDS[name].default)
           for name, (owner, param) in PEER_OWNER.items() if owner == policy}
    params = RunParams(prompt=text, model=str(model), policy=str(policy), compared_params=own, **values)
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
        p.decode_config()
    except ValueError as e:
        raise ValueError(f"These controls do not fit together: {e}.") from None
