"""The example prompts a model offers a visitor, and what it was trained on.

A chat model (LLaDA, Dream, a local checkpoint of theirs) gets a few chat prompts; one of our own
models gets held-out items of every task its tokenizer reads (core/tasks/), never seen in training.
"""

from __future__ import annotations

from core.loading import unknown_words
from core.tasks import Item, held_out
from core.tasks.word_problems import ITEMS, MAX_VALUE, NAMES

CHAT_EXAMPLES = (
    "Lily can run 12 kilometers per hour for 4 hours. After that, she runs 6 kilometers per hour. "
    "How many kilometers can she run in 8 hours?",
    "A baker makes 48 rolls and sells three quarters of them. How many rolls are left? Think step by step.",
    "Explain in two sentences why a diffusion language model can decode several tokens at once.",
    "Write a four-line poem about a cache that forgets.",
)
WORD_PROBLEMS = (f"short arithmetic word problems (names like {', '.join(NAMES[:3])}, things like "
                 f"{', '.join(ITEMS[:3])}, numbers up to {MAX_VALUE})")
STORIES = "short stories ('tell a story about mia and a dog in the park .')"


def task_examples(tokenizer) -> tuple[tuple[Item, ...], str]:
    """(example items, what the model was trained on) for one of our own models: held-out items of
    every task whose words its tokenizer knows (a story, a problem alone and after two worked
    examples), never seen in training. A story comes first, so it is the prompt a visitor finds in
    the box: its free choices are where the entropy trace crosses tau."""
    plain, shot, tales = held_out("words", 4), held_out("words", 1, shots=2), held_out("stories", 2)
    readable = [item for item in (tales[0], *plain, *shot, tales[1]) if not unknown_words(tokenizer, item.prompt)]
    tasks = [WORD_PROBLEMS + (", alone or after worked examples" if shot[0] in readable else "")]
    tasks += [STORIES] if tales[0] in readable else []
    trained_on = (f"This model was trained only on {' and '.join(tasks)}: click one of the example prompts "
                  "under the prompt box to try one, or write one like them.")
    return tuple(readable), trained_on
