"""Short stories from a probabilistic grammar (a checker grades them: evaluation/tasks/story_checker.py).

Why this task: the word problems leave the model almost nothing to choose, so its entropy is flat. A
story has real free choices (which event comes next, where the character goes, what they find, who
the friend is) between long runs of tokens that grammar and memory fix (articles, the pronoun of the
main character, the pet, the place they are in now, the friend's name). Code can still grade it:
every answer is parsed against the grammar while a state (place, friend) is tracked.

    prompt: "tell a story about mia and a dog in the park ."
    answer: "once upon a time , a girl named mia and her dog were in the park with her friend finn .
             the park was sunny . in the park , she found a red ball . then she went to the zoo with
             her dog . finn waved at mia . the zoo was quiet . ... that night , she went home with
             her dog and finn . the end ."

Rules the checker enforces (its reason names the first one broken, with the sentence number):
- every sentence is the grammar's: the story opens with OPENING, goes on with EVENTS and ends with
  ENDING ("... . the end ."), with nothing after it, and is 100 to 230 words long;
- the prompt's constraints: the main character, the pet and the starting place are the prompt's;
- pronouns and possessives ("she"/"he", "her"/"his", "a girl"/"a boy") agree with the main
  character's gender, and the pet is the prompt's wherever it is named;
- "in the X" and "the X was" name the place the character is in now (the start, or the last place
  gone to);
- the friend, chosen in the opening from FRIENDS, is the one named everywhere after.
Every rule is a reference: a word that must repeat one value written earlier. Rules that forbid a
value (not going to the place one is in, not finding an object one holds) are not among them: the 5M
embedded model learns none of them in its budget, while it learns every reference
(docs/EMBEDDED_MODEL.md has the measurements). For the same reason friends have names of their own:
a friend drawn from the main characters' names would need the rule "not the main character".

Every event is EVENT_WORDS words long, so a unit starts at a position fixed by the number of units
before it. With events of different lengths, a diffusion decoder that unmasks a confident word (a
period, "in the") before the event around it is chosen commits to a length, and a small model
miscounts: it writes a word of one event at the offset it has in another ("his amy hid in the park .").

Free choices: at each event the generator picks a template uniformly, then fills each slot uniformly
from what the state allows. `story_checker.choice_points` replays a story and gives, for each answer
token, how many different tokens the generator could have written there (free_share sums it up). Measured over
1000 stories of each split: 28% of answer tokens are free (2 to 8 options, median 6; ~50 free tokens
a story: which event, connective, place, look, color, object, the friend, pet's or friend's action,
feeling), the other 72% forced; answers are 121-221 words, median 181 (quartiles 151 and 211).
WORDS has 92 words, 87 of them beyond evaluation.tasks.word_problems's vocabulary.

Held-out prompts: a prompt (name, pet, place) is held out iff the sum of their list indices is a
multiple of 6 (96 of 576 prompts; every name, pet and place appears in both splits). make_split draws
'test' stories only from held-out prompts and 'train' only from the rest, from different seeds, so
no test prompt is ever a train prompt; a trainer drawing with make_story(rng) filters by is_held_out.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from evaluation.tasks.word_problems import NAMES

GENDER = {
    "mia": "girl", "leo": "boy", "ava": "girl", "sam": "boy", "zoe": "girl", "max": "boy",
    "ivy": "girl", "tom": "boy", "ben": "boy", "eva": "girl", "kai": "boy", "amy": "girl",
}  # fmt: skip
PRONOUN = {"girl": "she", "boy": "he"}
POSSESSIVE = {"girl": "her", "boy": "his"}
PETS = ["dog", "cat", "bird", "rabbit", "duck", "frog"]
PLACES = ["park", "garden", "forest", "zoo", "kitchen", "farm", "school", "market"]
OBJECTS = ["ball", "hat", "kite", "box", "key", "cup", "shoe", "flower"]
COLORS = ["red", "blue", "green", "yellow", "black", "white"]
LOOKS = ["big", "small", "quiet", "sunny", "busy", "dark"]  # how a place was
CONNECTIVES = ["then", "next", "later", "soon"]
PET_ACTS = ["ran", "jumped", "slept", "played", "hid", "sat"]
FRIEND_ACTS = ["smiled", "laughed", "waved", "looked", "shouted"]  # ... at <main character>
FEELINGS = ["happy", "glad", "surprised", "excited"]
FRIENDS = ["lily", "jack", "rosa", "finn", "nora", "otto", "ruby", "hugo"]  # never a main character
MIN_WORDS, MAX_WORDS = 100, 230  # the answer must fit a 256-token canvas with an end-of-text after it
PROMPT = "tell a story about {name} and a {pet} in the {place} ."
_GLUE = (
    "tell a story about and in the . , once upon time named were was found went to with friend at that night home end"
).split()
WORDS = sorted(
    set(
        _GLUE
        + list(PRONOUN.values())
        + list(POSSESSIVE.values())
        + list(GENDER.values())
        + PETS
        + PLACES
        + OBJECTS
        + COLORS
        + LOOKS
        + CONNECTIVES
        + PET_ACTS
        + FRIEND_ACTS
        + FEELINGS
        + FRIENDS
    )
)  # the vocabulary beyond evaluation.tasks.word_problems.NAMES (prompt and answer)


@dataclass(frozen=True)
class Story:
    prompt: str
    answer_text: str
    name: str  # the prompt's constraints, which the checker holds the answer to
    pet: str
    place: str


@dataclass(frozen=True)
class State:
    """What the story has established so far; later sentences must agree with it."""

    name: str
    pet: str
    place: str
    friend: str | None = None  # chosen in the opening

    @property
    def gender(self) -> str:
        return GENDER[self.name]


Domain = Callable[[State, dict], list[str]]


@dataclass(frozen=True)
class Slot:
    """A place in a template: `words` is what the grammar allows there (one word each), `domain` what
    the story's state allows, `why` the reason when a grammatical value is not allowed (formatted with
    v, the values so far and the state's fields)."""

    words: tuple[str, ...]
    domain: Domain
    why: str = "'{v}' is not allowed here"


def _free(words: list[str]) -> Slot:
    """A slot any of `words` may fill, whatever the story has established."""
    return Slot(tuple(words), lambda s, f: list(words))


SLOTS = {
    "conn": _free(CONNECTIVES),
    "pron": Slot(("she", "he"), lambda s, f: [PRONOUN[s.gender]], "'{v}' but {name} is a {gender}"),
    "poss": Slot(("her", "his"), lambda s, f: [POSSESSIVE[s.gender]], "'{v}' but {name} is a {gender}"),
    "kid_main": Slot(("girl", "boy"), lambda s, f: [s.gender], "'a {v}' but {name} is a {gender}"),
    "main": Slot(tuple(NAMES), lambda s, f: [s.name], "the story is about {v} but the prompt asks for {name}"),
    "main_again": Slot(tuple(NAMES), lambda s, f: [s.name], "at {v} but the main character is {name}"),
    "pet": Slot(tuple(PETS), lambda s, f: [s.pet], "a {v} but the pet is a {pet}"),
    "start": Slot(tuple(PLACES), lambda s, f: [s.place], "starts in the {v} but the prompt asks for the {place}"),
    "here": Slot(tuple(PLACES), lambda s, f: [s.place], "in the {v} but {name} is in the {place}"),
    "here_again": Slot(tuple(PLACES), lambda s, f: [s.place], "the {v} but {name} is in the {place}"),
    "to": _free(PLACES),
    "look": _free(LOOKS),
    "color": _free(COLORS),
    "thing": _free(OBJECTS),
    "new_friend": _free(FRIENDS),
    "friend": Slot(tuple(FRIENDS), lambda s, f: [s.friend], "{v} but the friend is {friend}"),
    "pet_act": _free(PET_ACTS),
    "friend_act": _free(FRIEND_ACTS),
    "feeling": _free(FEELINGS),
}


@dataclass(frozen=True)
class Template:
    """One unit of the grammar: its words ("{slot}" marks a slot) and what it changes in the state."""

    text: str
    apply: Callable[[State, dict], State] = lambda s, f: s
    parts: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.text.split()))


OPENING = Template(
    "once upon a time , a {kid_main} named {main} and {poss} {pet} were in the {start} with {poss} friend "
    "{new_friend} . the {here_again} was {look} .",
    apply=lambda s, f: replace(s, friend=f["new_friend"]),
)
EVENTS = [  # all EVENT_WORDS long, so every unit starts at a position fixed by how many came before
    Template("{conn} {pron} went to the {to} with {poss} {pet} .", apply=lambda s, f: replace(s, place=f["to"])),
    Template("in the {here} , {pron} found a {color} {thing} ."),
    Template("{conn} {poss} {pet} {pet_act} in the {here} with {friend} ."),
    Template("{friend} {friend_act} at {main_again} . the {here_again} was {look} ."),
    Template("{conn} {pron} and {friend} were {feeling} in the {here} ."),
]
ENDING = Template("that night , {pron} went home with {poss} {pet} and {friend} . the end .")
EVENT_WORDS = 10
assert all(len(t.parts) == EVENT_WORDS for t in EVENTS)
_MIN_TARGET = 120  # a story ends once its length with the ending reaches a target drawn from [120, MAX_WORDS]


def _fill(t: Template, s: State, rng: random.Random) -> dict:
    """A uniform choice at each slot, in order."""
    filled: dict = {}
    for p in t.parts:
        if p.startswith("{") and p[1:-1] not in filled:
            filled[p[1:-1]] = rng.choice(SLOTS[p[1:-1]].domain(s, filled))
    return filled


def _render(t: Template, filled: dict) -> list[str]:
    return [filled[p[1:-1]] if p.startswith("{") else p for p in t.parts]


def _may_go_on(n_words: int) -> bool:
    """Room for one more event and then the ending."""
    return n_words + EVENT_WORDS + len(ENDING.parts) <= MAX_WORDS


def next_units(n_words: int) -> list[Template]:
    """The units the generator may write next (events and/or the ending), by the story's length."""
    return (EVENTS if _may_go_on(n_words) else []) + ([ENDING] if n_words + len(ENDING.parts) >= _MIN_TARGET else [])


@functools.cache
def _prompt_triples(held_out: bool) -> list[tuple[str, str, str]]:
    return [
        (n, p, pl)
        for i, n in enumerate(NAMES) for j, p in enumerate(PETS) for k, pl in enumerate(PLACES)
        if ((i + j + k) % 6 == 0) == held_out
    ]  # fmt: skip


def is_held_out(prompt: str) -> bool:
    """Whether a story prompt belongs to the held-out (test) prompts; the trainer skips these."""
    name, pet, place = parse_prompt(prompt)
    return (NAMES.index(name) + PETS.index(pet) + PLACES.index(place)) % 6 == 0


def make_story(rng: random.Random, split: str | None = None) -> Story:
    """A random story; split 'train'/'test' restricts the prompt to the non-held-out/held-out ones."""
    if split is None:
        name, pet, place = rng.choice(NAMES), rng.choice(PETS), rng.choice(PLACES)
    else:
        name, pet, place = rng.choice(_prompt_triples(held_out={"train": False, "test": True}[split]))
    s, target, words = State(name, pet, place), rng.randint(_MIN_TARGET, MAX_WORDS), []
    t = OPENING
    while True:
        filled = _fill(t, s, rng)
        words += _render(t, filled)
        s = t.apply(s, filled)
        if t is ENDING:
            break
        ends = not _may_go_on(len(words)) or len(words) + len(ENDING.parts) >= target
        t = ENDING if ends else rng.choice(EVENTS)
    return Story(PROMPT.format(name=name, pet=pet, place=place), " ".join(words), name, pet, place)


def make_split(split: str, n: int) -> list[Story]:
    """Deterministic stories: 'train' and 'test' use different seeds and disjoint prompts (see is_held_out)."""
    rng = random.Random({"train": 11, "test": 12}[split])
    return [make_story(rng, split) for _ in range(n)]


def example_prompt() -> str:
    """A held-out story prompt, to show a person what the embedded model reads."""
    return make_split("test", 1)[0].prompt


def parse_prompt(prompt: str) -> tuple[str, str, str]:
    """(name, pet, place) of a story prompt, or a ValueError."""
    m = re.fullmatch(r"tell a story about (\w+) and a (\w+) in the (\w+) \.", " ".join(prompt.lower().split()))
    if not m or m[1] not in GENDER or m[2] not in PETS or m[3] not in PLACES:
        raise ValueError(f"not a story prompt: {prompt!r}")
    return m[1], m[2], m[3]
