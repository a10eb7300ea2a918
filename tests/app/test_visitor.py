"""A visitor's first minutes, in Chromium on a projector's 1366x768 screen, on the app served once for every
test here (the served and page fixtures, tests/app/conftest.py): what is in view, what the page says of
the inputs it was given, and whether its words follow what was raced."""

from __future__ import annotations

import re

import pytest
from folds import open_fold

from app.controls.panel import FOLDED

SCREEN = {"width": 1366, "height": 768}
RACE_S = 300_000  # ms: a race on the long example takes ~15 s here, ~40 s with the CPUs taken by others


@pytest.fixture
def viewport() -> dict:
    return SCREEN


def in_view(page, selector: str) -> bool:
    """Whether the top of the element `selector` is on the screen as it is scrolled now."""
    top = page.locator(selector).evaluate("el => el.getBoundingClientRect().top")
    return 0 <= top < SCREEN["height"]


def banner_says(page, text: str, element: str = "banner", timeout: int = RACE_S) -> None:
    page.wait_for_function(f"document.querySelector('#{element}')?.innerText.includes({text!r})", timeout=timeout)


def test_browser_a_preset_or_run_brings_the_race_into_view_and_empty_plots_say_what_they_will_show(page) -> None:
    banner_says(page, "max decoded-token entropy", "entropy-left", timeout=60_000)  # once plotly has drawn it
    assert "which rows each step computes" in page.locator("#rows-right").inner_text()
    assert not in_view(page, "#banner")  # the race is under the inputs: ~1,300 px down
    page.locator("#preset-cache-alone").click()  # sets the inputs, then races them
    page.wait_for_function("window.scrollY > 0", timeout=30_000)
    banner_says(page, "the cache alone")
    assert all(in_view(page, f"#{part}") for part in ("banner", "speed-left", "speed-right"))
    banner_says(page, "speedup (measured)")
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#run-btn").click()
    page.wait_for_function("window.scrollY > 0", timeout=30_000)
    assert all(in_view(page, f"#{part}") for part in ("banner", "speed-left", "speed-right"))
    banner_says(page, "speedup (measured)")


def type_prompt(page, text: str) -> None:
    """Open the prompt box (folded while it holds an example with a question) and type `text` into it."""
    box = page.locator("#prompt textarea")
    if not box.is_visible():
        open_fold(page, "#prompt-fold", FOLDED, "textarea")
    box.fill(text)


def set_number(page, key: str, value: str, prefix: str = "") -> None:
    """Type `value` into control `key`'s number box and leave it, as a visitor does."""
    box = page.locator(f"#{prefix}ctl-{key} input[type=number]")
    box.fill(value)
    box.press("Tab")


def race(page, prompt: str, **numbers: str) -> str:
    """Race `prompt` with the controls `numbers` typed in (the rest as the page has them); the banner at the end."""
    type_prompt(page, prompt)
    for key, value in numbers.items():
        set_number(page, key, value)
    page.locator("#run-btn").click()
    banner_says(page, "speedup (measured)")
    return page.locator("#banner").inner_text()


def test_browser_an_input_the_page_cannot_take_is_refused_by_name_and_one_the_server_changes_is_said(page) -> None:
    set_number(page, "tau", "-5")  # below the slider's 0: kept as typed, not put into the range
    page.locator("#run-btn").click()
    banner_says(page, "tau (EntropyCache) must be a number in [0, 12], got -5", timeout=30_000)
    assert page.locator("#ctl-tau input[type=number]").input_value() == "-5"
    set_number(page, "tau", "1")
    type_prompt(page, "mia has 7 marbles . " * 500)  # 10,000 characters: not cut in the box
    page.locator("#run-btn").click()
    banner_says(page, "The prompt is 10000 characters long; the limit is 6000.", timeout=30_000)
    banner = race(page, "  tell a story about tom and a duck in the garden .\n", threshold="1", gen_len="32",
                  block_len="16")
    assert "Changed: the prompt was sent with 3 blank characters (spaces, new lines) at its ends" in banner
    assert "Changed: asked parallel-decoding threshold 1, used parallel-decoding threshold unset (off)." in banner


def test_browser_the_papers_baseline_has_one_name_in_the_picker_the_lanes_the_tables_and_the_trace(page) -> None:
    page.locator("#policy input").click()
    options = [text.split("\n")[-1] for text in page.get_by_role("option").all_inner_texts()]  # past the ✓
    assert options[0] == "vanilla" and "none" not in options
    page.keyboard.press("Escape")
    page.locator("#preset-cache-alone").click()  # the cache alone: EntropyCache against the same baseline
    banner_says(page, "speedup (measured)")
    assert page.locator("#policy input").input_value() == "vanilla"
    shown = " ".join(page.locator(f"#{part}").inner_text() for part in ("banner", "lane-left", "time-panel"))
    summary = page.locator("#summary").inner_text()
    assert "Left: compared vanilla" in shown and "vanilla" in summary
    assert not re.search(r"\bnone\b", shown + summary)
    link = page.locator("#trace a[download]")
    link.wait_for(timeout=30_000)
    trace = page.request.get(link.get_attribute("href")).json()
    assert trace["settings"]["policy"] == trace["lanes"][0]["policy"] == "vanilla"


def test_browser_the_banner_says_what_was_raced_and_which_lane_finished_first(page) -> None:
    """A story (short) against vanilla at tau 0 with parallel decoding: the paper's lanes, not its prompt."""
    page.locator("#examples button").first.click()  # a story, at the model's gen 256
    page.wait_for_function("document.querySelector('#prompt textarea')?.value.startsWith('tell a story')",
                           timeout=30_000)
    for key, value in (("tau", "0"), ("threshold", "0.9")):
        set_number(page, key, value)
    page.locator("#run-btn").click()
    banner_says(page, "speedup (measured)")
    banner = page.locator("#banner").inner_text()
    assert "on a 14-token prompt, shorter than the 256-token answer" in banner
    assert "the paper's comparison." not in banner
    first = [side for side in ("left", "middle", "right")
             if "finished first" in page.locator(f"#speed-{side}").inner_text()]
    assert len(first) == 1
    assert banner.startswith("EntropyCache finished first" if first == ["right"] else f"The {first[0]} lane (")
    assert "yet" not in page.locator("#time-panel").inner_text()  # the race is over


def test_browser_the_summary_table_fits_the_screen_with_every_column(page) -> None:
    """Three lanes, the longest cells a race has (the middle lane's schedule, EntropyCache's policy)."""
    race(page, "mia has 7 marbles . mia buys 10 more marbles . how many marbles does mia have now ?", gen_len="32",
         block_len="16", threshold="0.9")
    banner_says(page, "entropy(tau=1.0, k=2)", "summary", timeout=30_000)  # the rows are in
    table = page.locator("#summary")
    table.scroll_into_view_if_needed()
    headers = table.locator("th")
    assert headers.count() == 12 and "parts from left at token" in " ".join(headers.nth(11).inner_text().split())
    last = headers.nth(11).bounding_box()
    assert last["x"] + last["width"] <= SCREEN["width"]
    assert table.locator(".virtual-table-viewport").evaluate("el => el.scrollWidth <= el.clientWidth")  # no scroll
    assert page.evaluate("document.documentElement.scrollWidth") <= SCREEN["width"]


def test_browser_the_drift_sentences_numbers_match_the_plots_and_the_plots_name_their_marks(page) -> None:
    page.get_by_role("tab", name="Drift").click(timeout=60_000)
    for key, value in (("gen_len", "64"), ("block_len", "32")):  # the default story, shorter
        set_number(page, key, value, prefix="drift-")
    page.locator("#drift-run-btn").click()
    banner_says(page, "Done: ", "drift-banner")
    status = page.locator("#drift-banner").inner_text()
    low, high = page.locator("#drift-scatter .js-plotly-plot").evaluate(
        "gd => [Math.min(...gd.data.flatMap(t => t.x)), Math.max(...gd.data.flatMap(t => t.x))]")
    assert f"have entropies from {low:.1f} to {high:.1f} nats." in status  # the range the scatter draws
    last = page.locator("#drift-step input[type=number]").get_attribute("max")
    assert f"(numbered 0 to {last}, as on the step slider)" in status
    assert "tau 1: above it, the next step is full" in page.locator("#drift-scatter").inner_text()
    assert "full step (the cache rewritten)" in page.locator("#drift-heatmap").inner_text()
    for plot in ("scatter", "volatility"):  # log axes ticked as percentages, not bare 2s and 5s
        ticks = page.locator(f"#drift-{plot} .ytick text").all_text_contents()
        assert ticks and all(tick.endswith("%") for tick in ticks), ticks


def test_browser_the_page_opens_on_a_short_intro_and_the_long_prompts_question_in_view(page) -> None:
    question = page.locator("#prompt-question")
    question.wait_for(timeout=60_000)
    assert question.inner_text().startswith("The question, last in the prompt: mia has 7 marbles")
    assert question.bounding_box()["y"] + question.bounding_box()["height"] <= SCREEN["height"]  # in view at once
    assert not page.locator("#prompt textarea").is_visible()  # the worked examples folded
    intro = page.locator("#how-it-works").evaluate("el => el.previousElementSibling.innerText")
    assert len(intro.splitlines()) <= 3 and len(intro) < 400, intro  # a few short lines; the rest folded
    assert not page.get_by_text("recomputes the whole cache only after").is_visible()
    page.locator("#how-it-works").get_by_text("How it works").click()
    page.get_by_text("recomputes the whole cache only after").wait_for(timeout=30_000)
    page.locator("#examples button").first.click()  # a story: its own question, shown whole
    page.locator("#prompt textarea").wait_for(timeout=30_000)
    page.wait_for_function("document.querySelector('#prompt textarea')?.value.startsWith('tell a story')",
                           timeout=30_000)
    assert not question.is_visible()


def test_browser_the_sweeps_sentences_agree_with_its_texts_and_the_held_out_count_hides_for_your_prompts(page) -> None:
    page.get_by_role("tab", name="Sweep").click(timeout=60_000)
    count = page.locator("#sweep-ctl-problems")
    count.wait_for(timeout=30_000)
    page.locator("#sweep-task").get_by_label("your prompts", exact=True).check()
    count.wait_for(state="hidden", timeout=30_000)  # your prompts are the box's lines: no count to set
    page.locator("#sweep-task").get_by_label("stories", exact=True).check()
    count.wait_for(state="visible", timeout=30_000)
    page.locator("#sweep-prompts textarea").fill("tell a story about tom and a duck in the garden .\n"
                                                 "tell a story about max and a bird in the farm .")
    page.locator("#sweep-taus textarea").fill("12")
    open_fold(page, "#sweep-decoding", "Decoding", "input[type=number]")
    for key, value in (("gen_len", "32"), ("block_len", "16")):
        set_number(page, key, value, prefix="sweep-")
    page.locator("#sweep-run-btn").click()
    banner_says(page, "Sweep done: 2 prompts", "sweep-banner")
    assert "--gen-len 32 --block 16" in page.locator("#sweep-banner").inner_text()  # swept as typed
    page.locator("#sweep-higher").click()  # the sweep's one point
    page.locator("#sweep-point .ec-prompt").nth(1).wait_for(timeout=30_000)
    head = page.locator("#sweep-point .ec-point-head").inner_text()
    shared = re.search(r"Tokens the same before the texts part: (.*); median", head).group(1).split(", ")
    for card, said in zip(page.locator("#sweep-point .ec-prompt").all(), shared):
        text = card.inner_text()
        if said.startswith("all "):  # never parts: the card says the same text
            assert "the same text as the exact decoder" in text
        else:  # the tokens shared, then the card's first differing token, counted from 1
            n = int(said.split(" ")[0])
            assert re.search(rf"(parts from the exact decoder's text at token {n + 1} of|stops after the first {n} |"
                             rf"the exact decoder's {n} tokens, then)", text), (said, text)
