"""The example prompts a model offers a visitor, each with its title in the examples list and the
decode settings picking it sets, and what the model was trained on.

A chat model (LLaDA, Dream, a local checkpoint of theirs) gets the long prompts of the paper's regime
first (app/serving/long_prompts.py), then a few short chat prompts, marked as short. One of our own
models gets held-out items of every task its tokenizer reads (evaluation/tasks/), never seen in training,
among them a word problem after four worked examples: the long prompt of its paper's comparison.
"""

from __future__ import annotations

from typing import NamedTuple

from app.serving.long_prompts import LONG_PROMPTS
from core.loading import unknown_words
from evaluation.tasks import Item, held_out
from evaluation.tasks.word_problems import ITEMS, MAX_VALUE, NAMES

CHAT_EXAMPLES = (
    "Lily can run 12 kilometers per hour for 4 hours. After that, she runs 6 kilometers per hour. "
    "How many kilometers can she run in 8 hours?",
    "A baker makes 48 rolls and sells three quarters of them. How many rolls are left? Think step by step.",
    "Explain in two sentences why a diffusion language model can decode several tokens at once.",
    "Write a four-line poem about a cache that forgets.",
)
LONG_BLOCK_LEN = 32  # the paper's evaluations decode in blocks of 32
WORD_PROBLEMS = (f"short arithmetic word problems (names like {', '.join(NAMES[:3])}, things like "
                 f"{', '.join(ITEMS[:3])}, numbers up to {MAX_VALUE})")
STORIES = "short stories ('tell a story about mia and a dog in the park .')"
TITLE_CHARS = 160  # an example's title is cut here


class Example(NamedTuple):
    text: str
    title: str  # how the examples list shows it
    settings: dict  # the decode settings picking it sets (controls by key), over the model's defaults
    long: bool = False  # a prompt of the paper's regime: the paper's comparison races the first one
    # What the prompt asks after its worked examples or passage, shown apart so that it stands out ('': the
    # prompt is its question).
    question: str = ""


def chat_examples() -> tuple[Example, ...]:
    """The long prompts, decoded at their own lengths, then the short chat prompts at the model's."""
    long = tuple(Example(p.text, p.title, {"gen_len": p.gen_len, "block_len": LONG_BLOCK_LEN}, True, p.question)
                 for p in LONG_PROMPTS)
    return long + tuple(Example(text, f"Short: {text}", {}) for text in CHAT_EXAMPLES)


# What the Race and Drift tabs offer a visitor whose prompt the model cannot read (their example prompts).
EXAMPLES_INSTEAD = "click one of the example prompts under the prompt box to try one, or write one like them."


def task_examples(tokenizer, task_settings: dict[str, dict]) -> tuple[tuple[Example, ...], str]:
    """(examples, what the model was trained on) for one of our own models: held-out items of every
    task whose words its tokenizer knows (a story, a problem alone, after two and after four worked
    examples), never seen in training, each with the settings its model declares for its task
    (ModelConfig.task_settings). A story comes first, so it is the prompt a visitor finds in the Drift
    tab's box: its free choices are where the entropy trace crosses tau."""
    plain, two, four = held_out("words", 4), held_out("words", 1, shots=2), held_out("words", 1, shots=4)
    tales = held_out("stories", 2)
    titled = [(tales[0], ""), *((item, "") for item in plain), (two[0], "2 worked examples, then: "),
              (four[0], "Long: a word problem after 4 worked examples, then: "), (tales[1], "")]
    readable = [(item, title) for item, title in titled if not unknown_words(tokenizer, item.prompt)]
    examples = tuple(_task_example(item, title, task_settings, item is four[0]) for item, title in readable)
    items = [item for item, _ in readable]
    tasks = [WORD_PROBLEMS + (", alone or after worked examples" if two[0] in items else "")]
    tasks += [STORIES] if tales[0] in items else []
    trained_on = f"This model was trained only on {' and '.join(tasks)}"
    return examples, trained_on


def _task_example(item: Item, title: str, task_settings: dict[str, dict], long: bool) -> Example:
    worked = bool(title) and item.reference is not None  # worked examples, then the problem itself
    question = item.reference.prompt if worked else item.prompt
    text = f"{title}{question}"
    return Example(item.prompt, text if len(text) <= TITLE_CHARS else f"{text[:TITLE_CHARS - 3]}...",
                   dict(task_settings.get(item.task, {})), long, question if worked else "")
