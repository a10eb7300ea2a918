"""A Race or Drift run as a visitor asked for it, checked once and built: the prompt, the model, the
DecodeConfig and the policies, with the checked controls a trace records.

`check_run` is the one place a run's raw inputs (as the UI or an API client sent them) are checked:
the numbers against their controls (app/controls/declared.py), the prompt against the model's
vocabulary (the registry), the work the run asks for against its budget (app/serving/budget.py), all
before any run is registered or anything decodes. What leaves it is
built, so no raw value travels further and nothing is built twice. No gradio here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from app.controls.declared import (
    DEFAULT_COMPARED,
    OURS,
    PEER_CONTROLS,
    RUN_CONTROLS,
    VANILLA,
    changed_settings,
    decode_config,
)
from app.serving.budget import Decode, check_decodes
from app.serving.registry import ModelChoice, ModelRegistry, prompt_tokens
from app.serving.sent import check_choice
from core.config import DecodeConfig
from core.loading import chat_prompt_ids, check_unicode
from core.policies import CachePolicy, make_policy

MAX_PROMPT_CHARS = 6000  # the longest example prompt (a passage of ~1,000 tokens) is ~4,500


class RawRun(NamedTuple):
    """A run's inputs as sent (unchecked)."""
    prompt: object
    model: object
    policy: object  # the picked policy: the Race's compared side, the Drift tab's probed one
    numbers: dict  # by RUN_CONTROLS key, and any other name sent (refused by check_run)
    compared: dict  # by PEER_CONTROLS key, those sent

    @classmethod
    def of(cls, sent: dict) -> RawRun:
        """A run's inputs by name (the panel's, Inputs.for_run, or an API client's keywords)."""
        rest = {key: value for key, value in sent.items() if key not in ("prompt", "model", "policy")}
        numbers = {key: value for key, value in rest.items() if key not in PEER_CONTROLS}
        compared = {key: value for key, value in rest.items() if key in PEER_CONTROLS}
        return cls(sent.get("prompt"), sent.get("model"), sent.get("policy"), numbers, compared)


def entropy_threshold(policy: CachePolicy) -> float | None:
    """The tau a policy that decides by entropy (CachePolicy.decides_by_entropy) was built with; None for
    any other. A live lane's tau is read here alone (its LaneLabel carries it to the plots; the Drift tab's
    run reads it from its lane); a recorded lane's is the trace's (app/race/trace_reader.py)."""
    return policy.params()["tau"] if policy.decides_by_entropy else None


def decoding_of(config: DecodeConfig) -> dict:
    """A decode's settings as a trace records them and a lane's label reads them (None: an optional one unset)."""
    return {p.name: getattr(config, p.name) for p in DecodeConfig.parameters}


@dataclass(frozen=True)
class LaneRun:
    """One decode of a run: a policy, built for this decode alone (it keeps its decode's state), at
    the lane's own settings."""

    side: str  # the Race's 'left' (the pick), 'middle' (the pick at EntropyCache's settings), 'right'
    policy: CachePolicy
    config: DecodeConfig

    @property
    def decoding(self) -> dict:
        return decoding_of(self.config)

    @property
    def tau(self) -> float | None:
        """The entropy its policy decides its full steps against (None: a policy that decides by none)."""
        return entropy_threshold(self.policy)


@dataclass(frozen=True)
class Run:
    prompt: str
    choice: ModelChoice  # the model, looked up once
    config: DecodeConfig  # the settings the controls say: EntropyCache's in the Race
    # The Race's lanes, left to right; the Drift tab's one decode.
    lanes: tuple[LaneRun, ...]
    settings: dict  # the checked controls by name, as a trace records them (0: an optional one unset)
    # The ids every lane decodes, as the prompt's check tokenized them; None where the model's tokenizer
    # was not at hand then (a GPU model not loaded yet): the renderer tokenizes once it is (ids).
    prompt_ids: tuple[int, ...] | None = None
    # What the run decodes otherwise than it was sent, each said as the value asked, the value used and
    # why: the tab's status line says it beside the run.
    changed: tuple[str, ...] = ()

    @property
    def model(self) -> str:
        """The registry's label of the model."""
        return self.choice.label

    @property
    def policies(self) -> tuple[CachePolicy, ...]:
        return tuple(lane.policy for lane in self.lanes)

    @property
    def tau(self) -> float | None:
        """EntropyCache's threshold in this run, as its lane's policy has it (None: no lane decides by entropy)."""
        return next((lane.tau for lane in self.lanes if lane.tau is not None), None)

    def ids(self, tokenizer) -> list[int]:
        """The prompt ids every lane decodes (core.loading.chat_prompt_ids), tokenized once."""
        return list(self.prompt_ids) if self.prompt_ids is not None else chat_prompt_ids(tokenizer, self.prompt)

    @property
    def max_steps(self) -> int:
        """The most steps a lane takes: one token per step, or `steps`. (With a threshold a block runs
        until it is done, at least one token a step: gen length steps at most.)"""
        return max(lane.config.max_steps for lane in self.lanes)


def check_prompt(prompt: object) -> str:
    """The prompt as the model reads it: without the blank characters at its ends (prompt_changes says so)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("Please enter a prompt: it is empty.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt)} characters long; the limit is {MAX_PROMPT_CHARS}.")
    return check_unicode(prompt, "The prompt").strip()


def prompt_changes(sent: str, text: str) -> list[str]:
    """What check_prompt cut of the prompt `sent` to give `text`, in words."""
    cut = len(sent) - len(text)
    if not cut:
        return []
    return [f"Changed: the prompt was sent with {cut} blank character{'s' * (cut != 1)} (spaces, new lines) at its "
            "ends; the model reads it without them."]


def check_run(registry: ModelRegistry, raw: RawRun, offered: Sequence[str], against_ours: bool) -> Run:
    """`raw` checked and built into a Run, or a ValueError with the visitor's message. `offered`: what
    the picked policy may be; `against_ours`: the Race's, where EntropyCache (tau, k) races the pick.
    Compared policies' controls that were sent are checked whichever policy they belong to; the
    picked one's missing ones take their defaults."""
    text = check_prompt(raw.prompt)
    choice = registry.choice(raw.model)
    check_choice(raw.policy, offered, "policy")
    missing = sorted(set(RUN_CONTROLS) - set(raw.numbers))
    unknown = sorted(set(raw.numbers) - set(RUN_CONTROLS)) + sorted(set(raw.compared) - set(PEER_CONTROLS))
    if missing or unknown:
        raise ValueError(f"bad controls: missing {missing}, unknown {unknown}")
    values = {key: control.check(raw.numbers[key]) for key, control in RUN_CONTROLS.items()}
    peers = {key: PEER_CONTROLS[key].check(value) for key, value in raw.compared.items()}
    config = decode_config(values, registry.graphs)
    own = {c.param.name: peers.get(key, c.default) for key, c in PEER_CONTROLS.items() if c.policy == raw.policy}
    ours = {c.param.name: values[key] for key, c in RUN_CONTROLS.items() if c.policy == OURS}
    ids = registry.check_prompt(choice, text)
    prompt_len = prompt_tokens(ids, text)
    settings = {"prompt": text, "model": choice.label, "policy": str(raw.policy), **values, "compared_params": own}
    lanes = race_lanes(str(raw.policy), own, ours, config) if against_ours else (
        LaneRun("left", _picked(str(raw.policy), own, ours), config),)
    check_decodes([Decode.of(prompt_len, lane.config) for lane in lanes], choice.device)
    changed = (*prompt_changes(raw.prompt, text), *changed_settings(values, config))
    return Run(text, choice, config, lanes, settings, None if ids is None else tuple(ids), changed)


def race_lanes(picked: str, own: dict, ours: dict, config: DecodeConfig) -> tuple[LaneRun, ...]:
    """The Race's lanes: the pick at its settings (vanilla: one token per step), EntropyCache at the
    controls'. Where the two settings differ, a middle lane runs the pick at EntropyCache's settings,
    so that the speedup splits into two factors, each measured between two lanes: the settings
    (parallel decoding) and the cache."""
    vanilla = picked == VANILLA
    compared = config.one_token_per_step() if vanilla else config
    lanes = [LaneRun("left", _picked(picked, own, ours), compared)]
    if compared != config:
        lanes.append(LaneRun("middle", _picked(picked, own, ours), config))
    return (*lanes, LaneRun("right", make_policy(OURS, **ours), config))


def _picked(name: str, own: dict, ours: dict) -> CachePolicy:
    """A new instance of the picked policy: vanilla decoding's is `none`, core's exact decoder."""
    if name == VANILLA:
        return make_policy(DEFAULT_COMPARED)
    return make_policy(OURS, **ours) if name == OURS else make_policy(name, **own)
