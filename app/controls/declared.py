"""The controls a visitor sets, as core declares them: EntropyCache's and each compared policy's
parameters and the decode settings (core.Param), each with a label and a slider over its declared UI
range.

The server enforces that range too, since the HTTP API accepts any value a client sends (the sliders
pass it on unchecked: app/controls/panel.py). Nothing is clamped or rounded silently: a bad value is
a ValueError whose message names the control and what it allows. No gradio here.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import DecodeConfig
from core.params import value_text
from core.policies import POLICIES, Param

OURS = "entropy"  # the policy of the Race's right-hand lane; the left-hand one is the visitor's pick
DEFAULT_COMPARED = "none"  # core's name of the exact decoder, the policy without a cache
# The one name the app shows for the policy without a cache, as the paper names its baseline: the
# control, the lanes, the tables and the traces say it for `none`. In the Race's picker it is the
# paper's baseline, vanilla decoding: the exact decoder one token per step, whatever the run's threshold
# or steps (DecodeConfig.one_token_per_step), with a middle lane at EntropyCache's settings where they
# differ (app/controls/run.py race_lanes).
VANILLA = "vanilla"


@dataclass(frozen=True)
class Control:
    """One declared setting as the app offers it. An optional setting (steps, threshold) shows 'unset'
    as 0, a value outside its declared bounds, so that 0 cannot mean anything else."""

    key: str  # the handler's and the HTTP API's parameter name: tau, gen_len, dllm_cache_rho
    param: Param
    label: str  # how the slider and every message name it
    policy: str = ""  # the policy whose parameter it is ('' for a decode setting)

    @classmethod
    def of(cls, param: Param, policy: str = "", key: str = "") -> Control:
        label = param.label or param.name
        return cls(key or param.name, param, f"{label} ({POLICIES[policy].__name__})" if policy else label, policy)

    @property
    def optional(self) -> bool:
        return self.param.default is None

    @property
    def default(self) -> int | float:
        return 0 if self.optional else self.param.default

    @property
    def slider_range(self) -> tuple[int | float, int | float]:
        low, high = self.param.slider_range
        return (0, high) if self.optional else (low, high)

    @property
    def info(self) -> str:
        return f"0: {self.param.unset}; {self.param.help}" if self.optional else self.param.help

    def check(self, value: object) -> int | float:
        """The value sent, if it is one the control allows (its declared UI range; 0 for an optional
        setting left unset), as the declared type; else a ValueError that names the control."""
        if self.optional and type(value) in (int, float) and value == 0:
            return self.param.kind(0)
        return self.param.check(value, ui=True, label=self.label)

    def setting(self, value: int | float) -> int | float | None:
        """A checked value as the setting it stands for (None: an optional one left unset)."""
        return None if self.optional and value == 0 else value

    def said(self, setting: int | float | str | None) -> str:
        """A setting of this control in words: 'threshold 0.9', 'steps unset (one token per step)'."""
        if setting is None:
            return f"{self.label} unset ({self.param.unset})"
        return f"{self.label} {value_text(setting)}"


def compared_policies() -> list[str]:
    """Every registered policy but ours, 'none' (the exact baseline) first."""
    rest = sorted(name for name in POLICIES if name not in (OURS, DEFAULT_COMPARED))
    return [DEFAULT_COMPARED, *rest] if DEFAULT_COMPARED in POLICIES else rest


def raced_policies() -> list[str]:
    """What the Race's compared lane may be: vanilla decoding first (the paper's baseline; its race at
    EntropyCache's settings is its middle lane against EntropyCache), then every compared policy with a
    cache, at EntropyCache's own settings."""
    return [VANILLA, *(name for name in compared_policies() if name != DEFAULT_COMPARED)]


def shown_policy(described: str) -> str:
    """A policy as the app names it (CachePolicy.describe(): 'none', 'dual', 'entropy(tau=1.0, k=2)'):
    the policy without a cache is `vanilla`, the others as they describe themselves. A name it already
    shows stays as it is, so a trace written with either name reads the same."""
    return VANILLA if described == DEFAULT_COMPARED else described


def probed_policies() -> list[str]:
    """What the Drift tab may probe: ours first, then every compared policy that keeps a cache."""
    return [OURS, *(name for name in compared_policies() if name != DEFAULT_COMPARED)]


def control_name(policy: str, param: str) -> str:
    """A compared policy's control as a Python name (the HTTP API's parameter): dllm-cache's rho is dllm_cache_rho."""
    return f"{policy.replace('-', '_')}_{param}"


DECODE_CONTROLS = {p.name: Control.of(p) for p in DecodeConfig.parameters}  # gen_len, block_len, ..., seed
# A Race or Drift run's numbers, in the order of the handlers' parameters: tau, k, then the decode settings.
RUN_CONTROLS = {**{p.name: Control.of(p, OURS) for p in POLICIES[OURS].parameters}, **DECODE_CONTROLS}
# Every compared policy's own controls, by control name, in the order of compared_policies().
PEER_CONTROLS = {control_name(name, p.name): Control.of(p, name, control_name(name, p.name))
                 for name in compared_policies() for p in POLICIES[name].parameters}


def decode_config(values: dict[str, int | float], graphs: str = "auto") -> DecodeConfig:
    """Checked decode controls (by key; those not given take DecodeConfig's defaults) as a DecodeConfig
    whose passes run as the server's `graphs` says (ModelRegistry.graphs). core judges how the controls
    fit together, in its words; only the steps/threshold clash is told first, in the sliders' words, to
    say which one to move."""
    steps, threshold = DECODE_CONTROLS["steps"], DECODE_CONTROLS["threshold"]
    if values.get("steps") and values.get("threshold"):
        raise ValueError(
            f"Set {steps.label} to 0 or the {threshold.label} to 0 (got steps {values['steps']}, threshold "
            f"{values['threshold']:g}): with a threshold each block is decoded until it is done, so steps has no "
            "meaning."
        )
    settings = {key: DECODE_CONTROLS[key].setting(value) for key, value in values.items() if key in DECODE_CONTROLS}
    try:
        config = DecodeConfig(**settings, graphs=graphs)
    except ValueError as e:
        raise ValueError(f"These controls do not fit together: {e}.") from None
    # A schedule that unmasks one token a step (as many steps as tokens, a threshold of 1, blocks of one
    # token) is that decode, raced and named as it.
    return config if config.parallel else config.one_token_per_step()


def changed_settings(values: dict[str, int | float | str], config: DecodeConfig) -> list[str]:
    """What `config` (decode_config's, from the checked controls `values`) decodes otherwise than the
    controls asked, said as the value asked, the value used and why: a schedule that unmasks one token a
    step is decoded as one token per step, in blocks. (Nothing else is changed: a value out of range is
    refused.)"""
    asked = {key: DECODE_CONTROLS[key].setting(value) for key, value in values.items() if key in DECODE_CONTROLS}
    changed = [key for key, setting in asked.items() if getattr(config, key) != setting]
    if not changed:
        return []
    pairs = "; ".join(f"asked {control.said(asked[key])}, used {control.said(getattr(config, key))}"
                      for key, control in DECODE_CONTROLS.items() if key in changed)
    return [f"Changed: {pairs}. These settings unmask one token a step, and such a decode is run (and named) as "
            "one token per step, in blocks."]
