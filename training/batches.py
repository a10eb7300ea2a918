"""Training batches for the embedded model: word problems asked 0- to 8-shot, stories, arithmetic drills.

Every row is a chat-template prompt, left-padded, then a response canvas. The loss may hide any
*target* token: the response (its answer and the end-of-text padding that fills the canvas), and in a
k-shot row every worked example's answer as well, as LLaDA's multi-turn SFT trains on every
response, so a 4-shot row teaches five answers for the tokens of one long prompt. Results carry a
group number shared with their copies (result_groups), so the loss can hide them together. A batch
holds one kind of row (similar lengths, little padding), as many rows as fit `tokens` tokens, or a
given number of rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

import torch

from core.config import DEFAULT_BLOCK_LEN
from core.loading import chat_frame
from evaluation.tasks import stories, word_problems

GEN_LEN = 256  # the response canvas of stories and of some word problems (the decode default)
SHORT_LEN = 64  # the canvas of most word problems (an answer is at most ~45 words) and of drills
DRILL_LEN = SHORT_LEN  # drills are short and training-only
MAX_SHOTS = 8


@dataclass(frozen=True)
class Batch:
    ids: torch.Tensor  # [rows, length]
    key_mask: torch.Tensor  # [rows, length], False at padding
    targets: torch.Tensor  # [rows, length], True where the loss may hide a token
    groups: torch.Tensor  # [rows, length], a result's group number (shared with its copies), else 0
    kind: str
    shots: int


def result_groups(words: list[str], copies: bool = True) -> list[int]:
    """For each answer word, the number of the arithmetic result it holds (1, 2, ...) or 0.

    A line's result `r` in "a op n = r ." is copied twice: as the next line's first operand and
    in "the answer is r". The three share a group so they can be hidden together: hidden alone,
    `r` could be copied from a visible copy, and the model would learn copying, not arithmetic.
    """
    groups = [0] * len(words)
    for g, i in enumerate((i for i in range(1, len(words)) if words[i - 1] == "="), start=1):
        groups[i] = g
        if not copies:  # a drill: facts are independent, the next operand is not a copy
            continue
        nxt = i + 2  # after "r ."
        if nxt < len(words) and words[nxt].isdigit():
            groups[nxt] = g
        elif words[nxt : nxt + 3] == ["the", "answer", "is"]:
            groups[nxt + 3] = g
    return groups


STORY_ENTITIES = frozenset(
    stories.PETS + stories.PLACES + stories.OBJECTS + stories.COLORS + stories.NAMES + stories.FRIENDS
)
GENDER_NOUNS = frozenset(stories.GENDER.values())  # only in the opening's "a girl named ..."
MAIN_GENDER_WORDS = frozenset([*stories.PRONOUN.values(), *stories.POSSESSIVE.values()])  # only the main's


def entity_groups(words: list[str]) -> list[int]:
    """For each story word, a group shared by every mention of the same entity word (the pet, a place,
    an object, a colour, a name), else 0; the main character's gender words ("a girl" in the opening,
    every she/he/her/his) share one group too. Hidden together, the mentions cannot be copied from
    each other, so the model must read the pet and the place from the prompt, the gender from the
    name, and an object from where it was found: the state a decode starts in, with the whole story
    still masked."""
    ids: dict[str, int] = {}
    opening_gender = next((i for i, w in enumerate(words) if w in GENDER_NOUNS), None)

    def key(i: int, w: str) -> str | None:
        if w in STORY_ENTITIES:
            return w
        return "gender" if w in MAIN_GENDER_WORDS or i == opening_gender else None

    keys = [key(i, w) for i, w in enumerate(words)]
    return [ids.setdefault(k, len(ids) + 1) if k else 0 for k in keys]


class _Row:
    """One sequence being built: content words (each one token), which are targets, their groups."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.targets: list[bool] = []
        self.groups: list[int] = []
        self.n_groups = 0

    def add(self, text: str, target: bool = False, groups: list[int] | None = None) -> None:
        words = text.split()
        self.words += words
        self.targets += [target] * len(words)
        groups = groups or [0] * len(words)
        self.groups += [g + self.n_groups if g else 0 for g in groups]
        self.n_groups += max(groups, default=0)

    def add_answer(self, text: str, copies: bool = True) -> None:
        self.add(text, target=True, groups=result_groups(text.split(), copies))


def _words_row(rng: random.Random, shots: int, held_out: set[str]) -> tuple[_Row, _Row]:
    """(prompt, response) of a word problem after `shots` worked examples (answers are targets)."""
    problems = []
    while len(problems) < shots + 1:
        p = word_problems.make_problem(rng)
        if p.prompt not in held_out:
            problems.append(p)
    prompt = _Row()
    for p in problems[:-1]:
        prompt.add(f"question : {p.prompt} answer :")
        prompt.add_answer(p.answer_text)
    prompt.add(f"question : {problems[-1].prompt}" if shots else problems[-1].prompt)
    response = _Row()
    response.add_answer(problems[-1].answer_text)
    return prompt, response


def _story_row(rng: random.Random) -> tuple[_Row, _Row]:
    story = stories.make_story(rng, split="train")
    prompt, response = _Row(), _Row()
    prompt.add(story.prompt)
    response.add(story.answer_text, target=True, groups=entity_groups(story.answer_text.split()))
    return prompt, response


def _drill_row(rng: random.Random) -> tuple[_Row, _Row]:
    text, answer = word_problems.make_drill(rng)
    prompt, response = _Row(), _Row()
    prompt.add(text)
    response.add_answer(answer, copies=False)
    return prompt, response


def make_batch(tokenizer, rng: random.Random, tokens: int, kind: str, shots: int = 0,
               held_out: frozenset[str] = frozenset(), canvas: int | None = None, block_prefix: float = 0.0,
               n_rows: int | None = None, drill_rows: float = 0.0) -> Batch:
    """A batch of `kind` ('words' with `shots` worked examples, 'stories', 'drills') of about `tokens`
    tokens (at least one row), or of exactly `n_rows` rows, each response on a `canvas`-token canvas
    (default: DRILL_LEN for drills, GEN_LEN otherwise). Word problems in `held_out` are never drawn.
    A `block_prefix` share of story rows is cut at a block boundary (`cut_at_block`). In a words
    batch, each row is a drill with probability `drill_rows`: drills mixed row by row into the word
    problems, on their canvas."""

    def words() -> tuple[_Row, _Row]:
        if drill_rows and rng.random() < drill_rows:
            return _drill_row(rng)
        return _words_row(rng, shots, held_out)

    make = {"words": words, "stories": lambda: _story_row(rng), "drills": lambda: _drill_row(rng)}[kind]
    canvas = canvas or (DRILL_LEN if kind == "drills" else GEN_LEN)
    before, after = chat_frame(tokenizer)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows: list[tuple[list[int], list[bool], list[int]]] = []

    def room() -> bool:  # for one more row
        if n_rows:
            return len(rows) < n_rows
        return (len(rows) + 1) * max(len(r[0]) for r in rows) <= tokens

    while not rows or room():
        prompt, response = make()
        assert len(response.words) <= canvas, "the answer fits its canvas"
        ids = [*before, *_ids(tokenizer, prompt.words), *after, *_ids(tokenizer, response.words)]
        fill = canvas - len(response.words)
        frame = len(before), len(after)
        targets = [False] * frame[0] + prompt.targets + [False] * frame[1] + response.targets + [True] * fill
        groups = [0] * frame[0] + prompt.groups + [0] * frame[1] + [g + prompt.n_groups if g else 0
                                                                    for g in response.groups] + [0] * fill
        row = ([*ids, *[eos] * fill], targets, groups)
        if kind == "stories" and block_prefix and rng.random() < block_prefix:
            row = cut_at_block(row, canvas, len(response.words), tokenizer.mask_token_id, rng)
        rows.append(row)
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    targets = torch.zeros(len(rows), width, dtype=torch.bool)
    groups = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (row_ids, row_targets, row_groups) in enumerate(rows):  # left padding: every canvas ends the row
        ids[i, width - len(row_ids) :] = torch.tensor(row_ids)
        targets[i, width - len(row_ids) :] = torch.tensor(row_targets)
        groups[i, width - len(row_ids) :] = torch.tensor(row_groups)
    return Batch(ids, ids != pad, targets, groups, kind, shots)


def cut_at_block(row: tuple[list[int], list[bool], list[int]], canvas: int, answer_len: int, mask_id: int,
                 rng: random.Random, block: int = DEFAULT_BLOCK_LEN) -> tuple[list[int], list[bool], list[int]]:
    """The row with its canvas cut at a block boundary inside the answer: every position from the cut
    on is a mask token that the loss never sees. Semi-autoregressive decoding works on one block
    while every later block is still all masks, a state the t-mask (uniform over the canvas) almost
    never shows. Without such rows the model never learned to take a story's starting place from
    the prompt (docs/EMBEDDED_MODEL.md)."""
    ids, targets, groups = row
    cuts = range(block, min(answer_len, canvas - 1) + 1, block)  # at least one answer word before the cut
    if not cuts:
        return row
    start = len(ids) - canvas + rng.choice(cuts)
    hidden = len(ids) - start
    return ids[:start] + [mask_id] * hidden, targets[:start] + [False] * hidden, groups[:start] + [0] * hidden


def _ids(tokenizer, words: list[str]) -> list[int]:
    """One id per word (the tokenizer is word-level); an unknown word is a bug in a task's vocabulary."""
    ids = tokenizer.convert_tokens_to_ids(words)
    if tokenizer.unk_token_id in ids:
        raise ValueError(f"word {words[ids.index(tokenizer.unk_token_id)]!r} is not in the tokenizer's vocabulary")
    return ids


class BatchKind(NamedTuple):
    kind: str
    shots: int  # worked examples before a word problem
    canvas: int  # the response canvas


def pick_kind(rng: random.Random, stories_share: float, drills_share: float, long_words: float = 1.0,
              max_shots: int = MAX_SHOTS) -> BatchKind:
    """The next batch's kind; for word problems, its number of worked examples (0..max_shots) and
    its canvas: GEN_LEN in a `long_words` share of word batches, else SHORT_LEN. A short canvas
    spends far fewer tokens on end-of-text padding; the long ones teach the padding's tail."""
    u = rng.random()
    if u < stories_share:
        return BatchKind("stories", 0, GEN_LEN)
    if u < stories_share + drills_share:
        return BatchKind("drills", 0, DRILL_LEN)
    shots = rng.randint(0, max_shots)
    return BatchKind("words", shots, GEN_LEN if rng.random() < long_words else SHORT_LEN)


VOCABULARIES = {
    "all": word_problems.VOCABULARY + stories.WORDS,  # every task's: the embedded model's
    "words-0-shot": word_problems.ZERO_SHOT_VOCABULARY,  # word problems asked alone, and drills
}


def vocabulary(name: str = "all") -> list[str]:
    """The words of vocabulary `name`, each once: a tokenizer is built from them. A model trained on
    fewer tasks holds only their words, and warm_start adds the rest when it moves on."""
    return list(dict.fromkeys(VOCABULARIES[name]))
