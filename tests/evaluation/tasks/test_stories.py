"""The story task: generator, held-out split, checker (good and broken stories), free choices, vocabulary."""

import random
import statistics

import pytest

from evaluation.tasks import stories
from evaluation.tasks import word_problems as task
from evaluation.tasks.stories import Story, is_held_out, make_split, make_story
from evaluation.tasks.story_checker import check_story, choice_points, free_share, repeated_events
from training.word_tokenizer import build_tokenizer

PROMPT = "tell a story about leo and a dog in the park ."
GOOD = (
    "once upon a time , a boy named leo and his dog were in the park with his friend lily . the park was sunny . "
    "in the park , he found a red ball . then he went to the farm with his dog . "
    "lily waved at leo . the farm was quiet . next his dog jumped in the farm with lily . "
    "soon he and lily were happy in the farm . later he went to the zoo with his dog . "
    "in the zoo , he found a blue hat . then his dog slept in the zoo with lily . "
    "lily smiled at leo . the zoo was big . soon he went to the garden with his dog . "
    "next his dog sat in the garden with lily . in the garden , he found a green kite . "
    "then he and lily were glad in the garden . that night , he went home with his dog and lily . the end ."
)


@pytest.fixture(scope="module")
def splits():
    return {split: make_split(split, 300) for split in ("train", "test")}


def test_every_generated_story_passes_and_fits(splits):
    for story in splits["train"] + splits["test"]:
        assert check_story(story, story.answer_text) == (True, ""), story.answer_text
        assert check_story(story.prompt, story.answer_text).ok
        assert 120 <= len(story.answer_text.split()) <= 230  # fits a 256 canvas with an end-of-text
        assert len(story.prompt.split()) <= 12
        assert set(story.prompt.split() + story.answer_text.split()) <= set(stories.WORDS + task.NAMES)


def test_splits_are_deterministic_and_disjoint(splits):
    assert make_split("test", 300) == splits["test"]
    assert make_split("train", 50) == splits["train"][:50]
    train, test = {s.prompt for s in splits["train"]}, {s.prompt for s in splits["test"]}
    assert not train & test
    assert all(is_held_out(p) for p in test) and not any(is_held_out(p) for p in train)
    assert len(test) > 50  # many held-out prompts, not a handful


def test_make_story_any_prompt_is_valid():
    rng = random.Random(0)
    for _ in range(50):
        story = make_story(rng)
        assert check_story(story, story.answer_text).ok


def test_repeated_events_counts_the_ten_word_units_seen_before():
    # GOOD: an opening, 13 events of ten words and the ending (its first ten words a unit too), none twice
    assert repeated_events(GOOD) == (0, 14)
    event = "lily waved at leo . the farm was quiet . "
    looping = GOOD.replace(event, event * 3)  # the same event twice more: grammatical, so the checker passes it
    assert check_story(PROMPT, looping) == (True, "") and repeated_events(looping) == (2, 16)
    opening = " ".join(GOOD.split()[:26]) + " "  # the opening: 26 words, two sentences
    went = "then he went to the farm with his dog . "
    assert repeated_events(opening + event * 4 + went + event) == (4, 6)
    assert repeated_events("") == (0, 0) and repeated_events("the end .") == (0, 0)
    assert repeated_events(opening + event.upper() + event) == (1, 2)  # case is a decoder's, not a word's


def test_hand_written_story_passes():
    assert 100 <= len(GOOD.split()) <= 230
    assert check_story(PROMPT, GOOD) == (True, "")
    assert check_story(PROMPT, "  " + GOOD.upper() + "\n").ok  # spacing and case as a decoder may give them


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("park , he found", "park , she found", "sentence 3: 'she' but leo is a boy"),
        ("farm with his dog", "farm with her dog", "sentence 4: 'her' but leo is a boy"),
        ("a boy named leo", "a girl named leo", "sentence 1: 'a girl' but leo is a boy"),
        ("his dog jumped in the farm", "his dog jumped in the park", "sentence 7: in the park but leo is in the farm"),
        ("lily were happy in the farm", "lily were happy in the zoo", "sentence 8: in the zoo but leo is"),
        ("the park was sunny", "the zoo was sunny", "sentence 2: the zoo but leo is in the park"),
        ("the farm was quiet", "the park was quiet", "sentence 6: the park but leo is in the farm"),
        ("lily waved at leo", "nora waved at leo", "sentence 5: nora but the friend is lily"),
        ("farm with lily", "farm with rosa", "sentence 7: rosa but the friend is lily"),
        ("his friend lily", "his friend tom", "sentence 1: not a sentence of the grammar: once upon"),  # not a friend
        ("lily smiled at leo", "lily smiled at tom", "sentence 12: at tom but the main character is leo"),
        ("his dog jumped in the farm", "his dog jumped the farm", "sentence 7: not a sentence of the grammar: next"),
        ("his dog slept", "his cat slept", "sentence 11: a cat but the pet is a dog"),
        ("to the farm with his dog .", "to the farm .", "sentence 4: not a sentence of the grammar"),
        ("home with his dog and lily", "home with his dog and rosa", "rosa but the friend is lily"),
    ],
)
def test_broken_story_fails_with_reason(old, new, reason):
    assert old in GOOD
    result = check_story(PROMPT, GOOD.replace(old, new, 1))
    assert not result.ok and reason in result.reason, result.reason


def test_consistent_edits_still_pass():
    assert check_story(PROMPT, GOOD.replace("lily", "nora")).ok  # another friend, named the same everywhere
    assert check_story(PROMPT, GOOD.replace("to the zoo", "to the farm").replace("the zoo", "the farm")).ok  # stays


def test_truncated_and_padded_stories_fail():
    words = GOOD.split()
    assert "no ending" in check_story(PROMPT, " ".join(words[:-3])).reason  # stops at a sentence end
    assert "no ending" in check_story(PROMPT, " ".join(words[:-5])).reason  # stops mid-sentence
    assert "no ending" in check_story(PROMPT, " ".join(words[:-1])).reason
    assert "no ending" in check_story(PROMPT, "").reason
    assert check_story(PROMPT, GOOD.replace("the end .", "the dog ran")).reason == (
        "sentence 19: not a sentence of the grammar: the dog ran"
    )
    assert check_story(PROMPT, GOOD.replace("the end .", "the end of it .")).reason.startswith(
        "sentence 19: not a sentence of the grammar: the end of"
    )
    assert "text after the end" in check_story(PROMPT, GOOD + " the dog ran .").reason
    short = (
        "once upon a time , a boy named leo and his dog were in the park with his friend lily . the park was sunny . "
        "that night , he went home with his dog and lily . the end ."
    )
    assert check_story(PROMPT, short) == (False, "41 words, outside 100-230")
    long = GOOD.replace("that night", "next his dog sat in the garden with lily . " * 7 + "that night")
    assert check_story(PROMPT, long) == (False, f"{len(long.split())} words, outside 100-230")


def test_prompt_constraints_are_held():
    def reason(old: str, new: str) -> str:
        return check_story(PROMPT.replace(old, new), GOOD).reason

    assert reason("leo", "mia") == "sentence 1: the story is about leo but the prompt asks for mia"
    assert reason("dog", "cat") == "sentence 1: a dog but the pet is a cat"
    assert reason("park", "zoo") == "sentence 1: starts in the park but the prompt asks for the zoo"
    story = Story(PROMPT, GOOD, "leo", "dog", "park")
    assert check_story(story, GOOD).ok
    with pytest.raises(ValueError):
        check_story("how many apples does mia have now ?", GOOD)


def test_free_choice_share_in_designed_range():
    sample = make_split("test", 200)
    share = free_share(sample)
    assert 0.10 <= share <= 0.30, share
    counts = [c for s in sample for c in choice_points(s)]
    assert len(counts) == sum(len(s.answer_text.split()) for s in sample)
    assert statistics.median(c for c in counts if c > 1) >= 4  # choice points have several options
    opening = choice_points(Story(PROMPT, GOOD, "leo", "dog", "park"))[:20]
    assert opening == [1] * 19 + [len(stories.FRIENDS)]  # the prompt fixes the opening up to the friend


def test_vocabulary_fits_the_word_tokenizer(splits):
    tokenizer = build_tokenizer(task.NAMES + task.ITEMS + task.NUMBERS + task.WORDS + stories.WORDS)
    assert len(set(stories.WORDS) - set(task.WORDS)) < 150
    for story in splits["test"][:100] + splits["train"][:100]:
        for text in (story.prompt, story.answer_text):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert tokenizer.unk_token_id not in ids
            assert len(ids) == len(text.split())  # one token per word
            assert tokenizer.decode(ids) == text
