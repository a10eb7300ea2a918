"""What a race compares, in words: each lane's policy and decode settings, which comparison the lanes
make (the paper's: EntropyCache with parallel decoding against vanilla decoding, on a long prompt; or
the cache alone, both lanes at the same settings; or what else was raced), which lane finished first,
and the speedup with its factors, each measured between two lanes.

A live race and a replayed trace are described from the same labels (LaneLabel), so a replay says
what its race said. No gradio here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from app.controls.declared import VANILLA, shown_policy
from app.controls.run import LaneRun
from app.race.decode import Lane
from core.config import DecodeConfig

SIDE_TITLES = {"left": "Left: compared", "middle": "Middle: compared at EntropyCache's settings",
               "right": "Right: EntropyCache"}
OUR_NAME = "EntropyCache"


@dataclass(frozen=True)
class LaneLabel:
    """One lane as the race shows it: its side, its policy as the policy describes itself, its decode
    settings (DecodeConfig's declared fields; None: unset) and the tau its policy decides by."""

    side: str  # left, middle or right
    policy: str  # as the app names it (shown_policy): vanilla, dual, entropy(tau=1.0, k=2)
    decoding: dict
    tau: float | None = None  # the policy's entropy threshold (app/controls/run.py entropy_threshold); None: none

    @classmethod
    def of(cls, lane: LaneRun) -> LaneLabel:
        return cls(lane.side, shown_policy(lane.policy.describe()), lane.decoding, lane.tau)

    @property
    def title(self) -> str:
        return SIDE_TITLES[self.side]

    @property
    def cached(self) -> bool:
        return self.policy != VANILLA

    @cached_property
    def config(self) -> DecodeConfig:
        """Its decode settings as the decoder takes them (a trace's are checked so: app/race/trace_reader.py)."""
        return DecodeConfig(**self.decoding)

    @property
    def parallel(self) -> bool:
        """A step may unmask more than one token (DecodeConfig.parallel)."""
        return self.config.parallel

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens a step unmasks, on average: gen_len / steps (1 where it is not parallel). None with a
        threshold, where a step unmasks every token the model is sure enough of, however many."""
        config = self.config
        if not config.parallel:
            return 1.0
        return None if config.threshold is not None else config.gen_len / config.steps

    @property
    def gain(self) -> str:
        """What its schedule gains over one token per step, in two words ('' for none)."""
        per_step = self.tokens_per_step
        if per_step is None:
            return "parallel decoding"
        return f"{_decimal(per_step)} tokens a step" if per_step > 1 else ""

    @property
    def schedule(self) -> str:
        """How many tokens a step unmasks, in words."""
        if not self.parallel:
            return "one token per step"
        if self.tokens_per_step is None:
            return f"{self.gain} (threshold {self.decoding['threshold']:g})"
        return f"{self.decoding['steps']} steps ({self.gain})"

    @property
    def name(self) -> str:
        """The lane in words: "vanilla decoding (no cache, one token per step)", "vanilla decoding (no cache),
        parallel decoding (threshold 0.9)", "dual, parallel decoding (threshold 0.9)"."""
        if not self.cached and not self.parallel:
            return "vanilla decoding (no cache, one token per step)"
        policy = OUR_NAME if self.side == "right" else ("vanilla decoding (no cache)" if not self.cached
                                                        else self.policy)
        return f"{policy}, {self.schedule}"


def _decimal(x: float) -> str:
    """A whole number as it is, else two decimals, or as many more as it takes not to round to a whole
    number: 2.67, and 1.004 (256 tokens in 255 steps), never 1."""
    if x.is_integer():
        return f"{x:.0f}"
    digits = 2
    while round(x, digits).is_integer():
        digits += 1
    return f"{x:.{digits}f}"


@dataclass(frozen=True)
class Comparison:
    """The race's lanes, left to right, and what their ratios mean; `prompt_len`: the prompt's tokens, which
    every lane decodes after."""

    labels: tuple[LaneLabel, ...]
    prompt_len: int

    @property
    def left(self) -> LaneLabel:
        return self.labels[0]

    @property
    def right(self) -> LaneLabel:
        return self.labels[-1]

    @property
    def same_settings(self) -> bool:
        return self.left.decoding == self.right.decoding

    @property
    def long_prompt(self) -> bool:
        """The paper's regime: a prompt at least as long as the answer, so that most rows of a full pass are
        prompt rows a cache can reuse (the models' long examples are: app/serving/long_prompts.py)."""
        return self.prompt_len >= self.right.decoding["gen_len"]

    def words(self) -> str:
        """Which comparison the race shows, in one sentence, from the lanes raced and the prompt: the paper's
        only where it is (vanilla decoding against EntropyCache with parallel decoding, on a long prompt)."""
        left, right = self.left, self.right
        prompt = f"on a {self.prompt_len}-token prompt"
        if self.same_settings:
            base = "vanilla decoding (no cache)" if not left.cached else left.policy
            alone = ": the cache alone" if not left.cached else ""
            return f"{OUR_NAME} against {base}, both at {right.schedule}, {prompt}{alone}"
        if left.cached or left.parallel or not right.parallel:
            return f"{right.name} against {left.name}, {prompt}"
        lanes = f"{OUR_NAME} with {right.schedule} against {left.name}, {prompt}"
        if self.long_prompt:
            return f"{lanes}: the paper's comparison"
        return (f"{lanes}, shorter than the {right.decoding['gen_len']}-token answer: the paper's comparison races "
                "a long prompt, where most rows of a pass are the prompt's, for a cache to reuse")

    def finished_first(self, clocks: Sequence[float], first: int) -> str:
        """Which lane finished first (index `first`), and its time; EntropyCache's too where another lane beat
        it. `clocks`: each lane's compute seconds, left to right."""
        ours = f"{OUR_NAME} finished in {clocks[-1]:.3f} s"
        if first == len(self.labels) - 1:
            return f"{OUR_NAME} finished first, in {clocks[-1]:.3f} s"
        label = self.labels[first]
        return f"The {label.side} lane ({label.name}) finished first, in {clocks[first]:.3f} s; {ours}"

    def factor_names(self) -> tuple[str, str] | None:
        """With a middle lane: what the left-to-middle and the middle-to-right ratios measure."""
        if len(self.labels) < 3:
            return None
        middle = self.labels[1]
        cache = "the cache" if not middle.cached else f"{OUR_NAME} in place of {middle.policy}"
        return self.right.gain, cache


def speedup(base: Lane, ours: Lane, finished: bool) -> float | None:
    """How much faster `ours` decodes than `base`, as measured.

    While the race runs (`finished` false): the ratio of their decode rates (positions unmasked per
    compute second), the only comparison that is fair before every lane is done. Once it is finished:
    the ratio of their total compute times, i.e. time to finish. One measure for every ratio of a
    race at a time, so that its factors multiply to its total.
    """
    if finished:
        return base.clock / ours.clock if ours.clock > 0 else None
    if not (base.clock and ours.clock and base.decoded and ours.decoded):
        return None
    return (ours.decoded / ours.clock) / (base.decoded / base.clock)


def factors(lanes: Sequence[Lane]) -> tuple[float | None, float | None] | None:
    """With three lanes: the left-to-middle and middle-to-right speedups, each between the two lanes
    it names, measured as the total is (speedup), so that their product is the total."""
    if len(lanes) < 3:
        return None
    finished = all(lane.done for lane in lanes)
    return speedup(lanes[0], lanes[1], finished), speedup(lanes[1], lanes[2], finished)
