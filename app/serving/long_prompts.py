"""Long example prompts for the 8B chat models, written for this project (the texts are in prompts/):
the regime the paper measures in (few-shot benchmarks, prompts of several hundred to about a thousand
tokens, answers of 256-512 tokens), where most rows of a full pass are prompt rows a cache can reuse.

Each is a LongPrompt: the text, a short title for the examples list, and the response length it is
decoded at (in blocks of 32, as the paper's evaluations decode).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

PROMPTS = Path(__file__).with_name("prompts")


class LongPrompt(NamedTuple):
    title: str
    text: str
    gen_len: int

    @property
    def question(self) -> str:
        """What the prompt asks, after its worked examples or its passage: its last paragraph's first line
        (each prompt ends so)."""
        return self.text.rsplit("\n\n", 1)[-1].splitlines()[0]


def _text(name: str) -> str:
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8").strip()


LONG_PROMPTS = (
    LongPrompt("Long: a math problem after 5 worked examples (few-shot, as in GSM8K evaluation)",
               _text("math_few_shot"), 256),
    LongPrompt("Long: a question about a passage of about 1,000 tokens", _text("passage_question"), 256),
    LongPrompt("Long: a code task on a 60-line module (gen 512)", _text("code_task"), 512),
)
