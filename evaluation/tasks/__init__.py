"""The embedded model's tasks: word problems (word_problems.py) and stories (stories.py).

Each gives held-out items to decode (a prompt and what grading needs) and grades a decoded answer:
a word problem by its final number, a story by the story checker. The bench (`--task`, `--shots`)
and the app's example prompts take their items from here. Prompts of one's own (`bench --prompts`,
the app's Sweep tab) are items too, with nothing to grade them by.
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluation.tasks import stories, story_checker, word_problems

TASKS = ("words", "stories", "mix")
OWN = "own"  # the task of a prompt of one's own: no known answer


@dataclass(frozen=True)
class Item:
    task: str  # "words", "stories" or OWN
    prompt: str
    reference: word_problems.Problem | stories.Story | None  # None: nothing to grade by (OWN)
    shots: tuple[word_problems.Problem, ...] = ()  # the worked examples in a k-shot prompt


def held_out(task: str, n: int, shots: int = 0) -> list[Item]:
    """n held-out items of `task` ('mix': words and stories alternating). Word problems are asked
    after `shots` worked examples (drawn from their own split, different for every item)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    if not isinstance(shots, int) or shots < 0:
        raise ValueError(f"shots must be a non-negative integer, got {shots!r}")
    if task == "mix":
        words, tales = held_out("words", (n + 1) // 2, shots), held_out("stories", n // 2)
        return [item for pair in zip(words, tales + [None]) for item in pair if item is not None][:n]
    if task == "stories":
        return [Item("stories", s.prompt, s) for s in stories.make_split("test", n)]
    examples = word_problems.make_split("shots", n * shots)
    worked = [tuple(examples[i * shots : (i + 1) * shots]) for i in range(n)]
    return [Item("words", word_problems.few_shot_prompt(p, list(w)), p, w)
            for p, w in zip(word_problems.make_split("test", n), worked)]


def prompt_lines(text: str) -> list[tuple[int, str]]:
    """(line number from 1, prompt) for each line of `text` that is not blank, stripped: one prompt a
    line, as `bench --prompts FILE` reads a file and the Sweep tab its box (a message names the line)."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def own_items(prompts: list[str]) -> list[Item]:
    """Prompts of one's own as items: decoded like held-out ones, never graded."""
    return [Item(OWN, prompt, None) for prompt in prompts]


def repeats(item: Item, answer_text: str) -> tuple[int, int]:
    """(events repeating an earlier one, events) of a story's answer (story_checker.repeated_events); an item of
    another task has none."""
    return story_checker.repeated_events(answer_text) if item.task == "stories" else (0, 0)


def is_correct(item: Item, answer_text: str) -> bool | None:
    """A word problem's final number is right; a story passes the story checker; None for a prompt
    with no known answer."""
    if item.reference is None:
        return None
    if item.task == "stories":
        return story_checker.check_story(item.reference, answer_text).ok
    return word_problems.extract_answer(answer_text) == item.reference.answer
