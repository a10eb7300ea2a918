"""The embedded model's task: multi-step word problems with a worked chain of thought.

Why this task: every answer is exact and checkable, the chain of thought gives the model real
intermediate steps (each line depends on the one before), a distractor sentence makes it read the
question, and the whole language fits in a 121-token vocabulary, so a model of a few million
parameters can learn it on two CPU cores in under an hour. Train and held-out problems come from
disjoint seeds and duplicates of held-out prompts are removed from training.

    prompt: "mia has 12 marbles . leo has 4 coins . mia buys 7 more marbles . mia gives 5 marbles
             to leo . then mia doubles the marbles . how many marbles does mia have now ?"
    answer: "mia starts with 12 marbles . 12 + 7 = 19 . 19 - 5 = 14 . 14 * 2 = 28 . the answer is 28 ."
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

NAMES = ["mia", "leo", "ava", "sam", "zoe", "max", "ivy", "tom", "ben", "eva", "kai", "amy"]
ITEMS = ["apples", "marbles", "coins", "stickers", "books", "pencils", "cards", "shells", "cookies", "stamps"]
MAX_VALUE = 60  # every intermediate result stays in [0, MAX_VALUE]
NUMBERS = [str(i) for i in range(MAX_VALUE + 1)]
WORDS = (
    "has have buys finds gets more from gives to loses then doubles triples half of the how many does now ? "
    ". starts with + - * / = answer is"
).split()
FEW_SHOT_WORDS = ["question", ":"]  # the frame around worked examples in a k-shot prompt (few_shot_prompt)
ZERO_SHOT_VOCABULARY = NAMES + ITEMS + NUMBERS + WORDS  # a problem asked alone, its answer, a drill
VOCABULARY = ZERO_SHOT_VOCABULARY + FEW_SHOT_WORDS  # every word of the task (prompts, answers, worked examples)


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer_text: str  # the worked chain of thought, ending in "the answer is N ."
    answer: int


def _operation(rng: random.Random, name: str, other: str, item: str, value: int):
    """One sentence changing `value`; returns (sentence, line of working, new value) or None."""
    kind = rng.choice(["buy", "find", "get", "give", "lose", "double", "triple", "half"])
    n = rng.randint(1, 10)
    if kind in ("buy", "find", "get") and value + n <= MAX_VALUE:
        verb = {
            "buy": f"{name} buys {n} more {item}",
            "find": f"{name} finds {n} more {item}",
            "get": f"{name} gets {n} more {item} from {other}",
        }[kind]
        return verb, f"{value} + {n} = {value + n}", value + n
    if kind in ("give", "lose") and value - n >= 0:
        verb = f"{name} gives {n} {item} to {other}" if kind == "give" else f"{name} loses {n} {item}"
        return verb, f"{value} - {n} = {value - n}", value - n
    if kind == "double" and value * 2 <= MAX_VALUE:
        return f"then {name} doubles the {item}", f"{value} * 2 = {value * 2}", value * 2
    if kind == "triple" and value * 3 <= MAX_VALUE:
        return f"then {name} triples the {item}", f"{value} * 3 = {value * 3}", value * 3
    if kind == "half" and value % 2 == 0 and value > 0:
        return f"{name} gives half of the {item} to {other}", f"{value} / 2 = {value // 2}", value // 2
    return None


def make_problem(rng: random.Random, min_ops: int = 2, max_ops: int = 5) -> Problem:
    name, other = rng.sample(NAMES, 2)
    item, other_item = rng.sample(ITEMS, 2)
    value = rng.randint(2, 20)
    sentences = [f"{name} has {value} {item}"]
    if rng.random() < 0.5:  # a distractor the answer must ignore
        sentences.append(f"{other} has {rng.randint(1, 20)} {other_item}")
    lines = [f"{name} starts with {value} {item}"]
    n_ops = rng.randint(min_ops, max_ops)
    while len(lines) - 1 < n_ops:
        op = _operation(rng, name, other, item, value)
        if op:
            sentences.append(op[0])
            lines.append(op[1])
            value = op[2]
    sentences.append(f"how many {item} does {name} have now ?")
    lines.append(f"the answer is {value}")
    return Problem(" . ".join(sentences[:-1]) + " . " + sentences[-1], " . ".join(lines) + " .", value)


def make_drill(rng: random.Random, n_facts: int = 10) -> tuple[str, str]:
    """A training-only arithmetic drill: (prompt of operands, response of worked facts).

        prompt: "48 + 9 . 12 * 3 . 30 / 2 ."     response: "48 + 9 = 57 . 12 * 3 = 36 . 30 / 2 = 15 ."

    The word problems' errors are arithmetic slips on facts a batch rarely shows (large values).
    A drill holds ~10 facts in the tokens a problem spends on ~3.5, drawn uniformly over the values
    0..MAX_VALUE, with the same line format as a worked answer, so facts are seen more often per
    step without changing the problems' own distribution.
    """
    lines: list[str] = []
    while len(lines) < n_facts:
        op = _operation(rng, "x", "y", "z", rng.randint(0, MAX_VALUE))
        if op:
            lines.append(op[1])
    prompt = " . ".join(line.split(" = ")[0] for line in lines) + " ."
    return prompt, " . ".join(lines) + " ."


def make_split(split: str, n: int) -> list[Problem]:
    """Deterministic problems: 'train', 'test' and 'shots' (worked examples for k-shot prompts) use
    different seeds; test prompts never train."""
    seed = {"train": 1, "test": 2, "shots": 3}[split]
    rng = random.Random(seed)
    return [make_problem(rng) for _ in range(n)]


def few_shot_prompt(question: Problem, shots: list[Problem]) -> str:
    """lm-eval's k-shot shape in the task's own words: each worked example as 'question : ... answer :
    ...', then the question; with no shots, the question alone."""
    if not shots:
        return question.prompt
    worked = [f"question : {s.prompt} answer : {s.answer_text}" for s in shots]
    return " ".join([*worked, f"question : {question.prompt}"])


def extract_answer(text: str) -> int | None:
    """The number after the last 'answer is' in a decoded response, or None."""
    found = re.findall(r"answer is (\d+)", text)
    return int(found[-1]) if found else None


def example_prompt() -> str:
    """A held-out problem, to show a person what the embedded model reads."""
    return make_split("test", 1)[0].prompt
