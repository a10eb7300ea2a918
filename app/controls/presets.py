"""The Race's presets: comparisons named after what they show, each a compared lane and settings for
every control, raced on the model's long example (ModelChoice.paper_example).

- The paper's comparison: EntropyCache at its defaults with Fast-dLLM's parallel decoding (threshold
  0.9) against vanilla decoding (the exact decoder, one token per step), gen 256, block 32, on a long
  few-shot prompt: the comparison behind the paper's 15-26x. The race adds a middle lane, no cache
  at EntropyCache's settings, so the speedup splits into parallel decoding and the cache.
- The cache alone: EntropyCache against vanilla decoding, both one token per step, on the same prompt.

No gradio here.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.controls.declared import RUN_CONTROLS, VANILLA, decode_config
from app.controls.run import race_lanes

PAPER_LENGTHS = {"gen_len": 256, "block_len": 32}  # the paper's evaluations (d2Cache's defaults)


@dataclass(frozen=True)
class Preset:
    key: str  # its button's element id: preset-<key>
    name: str
    words: str  # what it races, in a sentence
    policy: str  # the compared lane
    settings: dict  # controls by key; every other control at its default (EntropyCache's tau and k too)

    def controls(self) -> dict[str, int | float]:
        """Every Race control's value under this preset."""
        return {key: self.settings.get(key, control.default) for key, control in RUN_CONTROLS.items()}

    @property
    def lanes(self) -> int:
        """How many lanes a race of this preset runs."""
        return len(race_lanes(self.policy, {}, {}, decode_config(self.controls())))


PAPER = Preset("paper", "The paper's comparison",
               "EntropyCache at its defaults with parallel decoding (threshold 0.9) against vanilla decoding "
               "(no cache, one token per step), gen 256, block 32, on a long few-shot prompt; a middle lane runs "
               "vanilla decoding at EntropyCache's settings, so the speedup splits into its two factors.",
               VANILLA, {**PAPER_LENGTHS, "threshold": 0.9})
CACHE_ALONE = Preset("cache-alone", "The cache alone",
                     "EntropyCache against vanilla decoding (no cache), both one token per step, on the same long "
                     "prompt: what the cache saves by itself.", VANILLA, dict(PAPER_LENGTHS))
PRESETS = (PAPER, CACHE_ALONE)
DEFAULT_PRESET = PAPER  # the Race opens on it
