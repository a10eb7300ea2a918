"""A decoded story read back against the grammar of evaluation/tasks/stories.py: its grade (check_story:
the first rule it breaks, with the sentence number), the events it repeats (repeated_events), and,
replayed, how many words the generator could have written at each of its words (choice_points,
free_share).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from evaluation.tasks.stories import (
    ENDING,
    EVENT_WORDS,
    EVENTS,
    MAX_WORDS,
    MIN_WORDS,
    OPENING,
    SLOTS,
    State,
    Story,
    Template,
    next_units,
    parse_prompt,
)


class CheckResult(NamedTuple):
    ok: bool
    reason: str  # "" when ok, else the first rule broken, e.g. "sentence 4: 'she' but leo is a boy"


class _Reject(Exception):
    def __init__(self, at: int, reason: str):
        super().__init__(reason)
        self.at, self.reason = at, reason


def _match(t: Template, words: list[str], i: int) -> tuple[dict, dict, int] | int:
    """Match t's grammar (not yet the state) at words[i:]: (values, word index of each slot, end), or the
    index of the first word that does not fit (len(words) if the words run out: a truncated story)."""
    filled, where = {}, {}
    for p in t.parts:
        slot = p[1:-1] if p.startswith("{") else None
        if i >= len(words):
            return len(words)
        if words[i] not in (SLOTS[slot].words if slot else (p,)):
            return i
        if slot:
            filled[slot], where[slot] = words[i], i
        i += 1
    return filled, where, i


def _broken(s: State, filled: dict, where: dict) -> tuple[int, str] | None:
    """The first state rule a grammatical match breaks: (word index, reason), or None."""
    # in template order (a domain may read the values before it), but the prompt's character first, so a
    # story about the wrong character says so rather than that its 'a boy' is wrong
    for slot in sorted(filled, key=lambda slot: slot != "main"):
        value, why = filled[slot], SLOTS[slot].why
        if value in SLOTS[slot].domain(s, filled):
            continue
        fields = {**filled, "name": s.name, "gender": s.gender, "place": s.place, "pet": s.pet, "friend": s.friend}
        return where[slot], why.format(v=value, **fields)
    return None


def _ungrammatical(words: list[str], i: int, far: int) -> _Reject:
    """No template fits at words[i]: name the sentence where the closest one stopped fitting."""
    if far >= len(words):
        return _Reject(i, "no ending: the story stops before 'the end .'")
    start = max((j + 1 for j in range(i, far) if words[j] == "."), default=i)
    stop = words.index(".", far) + 1 if "." in words[far:] else len(words)
    return _Reject(start, "not a sentence of the grammar: " + " ".join(words[start:stop]))


def _parse(s: State, words: list[str]) -> Iterator[tuple[State, int, int, Template]]:
    """Replay a story: yields (state before, start, end, template) per unit; raises _Reject on the first fault."""
    i, pool = 0, [OPENING]
    while True:
        faults, far = [], i
        for t in pool:
            m = _match(t, words, i)
            if isinstance(m, int):
                far = max(far, m)
                continue
            fault = _broken(s, m[0], m[1])
            if fault is None:
                yield s, i, m[2], t
                s, i = t.apply(s, m[0]), m[2]
                break
            faults.append(fault)
        else:
            raise _Reject(*faults[0]) if faults else _ungrammatical(words, i, far)
        if t is ENDING:
            if i < len(words):
                raise _Reject(i, "text after the end: " + " ".join(words[i : i + 8]))
            return
        pool = [*EVENTS, ENDING]


def check_story(story_or_prompt: Story | str, text: str) -> CheckResult:
    """Grade a decoded answer (words joined by spaces) against the grammar, the state rules and the prompt."""
    prompt = story_or_prompt.prompt if isinstance(story_or_prompt, Story) else story_or_prompt
    s = State(*parse_prompt(prompt))
    words = text.lower().split()
    try:
        for _ in _parse(s, words):
            pass
    except _Reject as e:
        return CheckResult(False, f"sentence {words[: e.at].count('.') + 1}: {e.reason}")
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return CheckResult(False, f"{len(words)} words, outside {MIN_WORDS}-{MAX_WORDS}")
    return CheckResult(True, "")


def repeated_events(text: str) -> tuple[int, int]:
    """(events that repeat an earlier one word for word, events) of a decoded story. Its events are
    the EVENT_WORDS-word units after the opening's words: where a grammatical story's events stand,
    and a fixed cut of any other text. A story that loops breaks no rule of the checker; this is what
    sees it."""
    words, start = text.lower().split(), len(OPENING.parts)
    units = [tuple(words[i : i + EVENT_WORDS]) for i in range(start, len(words) - EVENT_WORDS + 1, EVENT_WORDS)]
    return len(units) - len(set(units)), len(units)


def _options(pool: list[Template], s: State, words: list[str]) -> Iterator[int]:
    """For each of `words` (one unit), how many different words the templates in pool could put there,
    given the words before it: a lazy walk over all the fillings the state allows."""
    branches = [(t, 0, {}) for t in pool]  # (template, next part, values so far)
    for w in words:
        nexts: dict[str, list] = {}
        for t, k, filled in branches:
            if k < len(t.parts) and t.parts[k].startswith("{"):
                slot = t.parts[k][1:-1]
                for v in SLOTS[slot].domain(s, filled):
                    nexts.setdefault(v, []).append((t, k + 1, {**filled, slot: v}))
            elif k < len(t.parts):
                nexts.setdefault(t.parts[k], []).append((t, k + 1, filled))
        yield len(nexts)
        branches = nexts[w]


def choice_points(story: Story) -> list[int]:
    """For each answer word, how many different words the generator could have written there (1 = forced)."""
    words = story.answer_text.split()
    counts: list[int] = []
    for s, start, end, _ in _parse(State(story.name, story.pet, story.place), words):
        pool = [OPENING] if start == 0 else next_units(start)
        counts += _options(pool, s, words[start:end])
    return counts


def free_share(stories: list[Story]) -> float:
    """The share of answer words that were free choices (2 or more options) over these stories."""
    counts = [c for story in stories for c in choice_points(story)]
    return sum(c > 1 for c in counts) / len(counts)
