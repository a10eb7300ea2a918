"""A prompt too long for the model: what the app's tabs must refuse clearly once core's own check meets it."""

from app.controls.declared import RUN_CONTROLS


def too_long_prompt(model) -> tuple[str, int]:
    """600 words the model knows, and the longest gen length the controls allow: together they pass the
    model's max_seq_len (asserted, else the tests need a longer prompt)."""
    prompt = "a " * 600  # 600 words the model knows
    longest = RUN_CONTROLS["gen_len"].slider_range[1]
    assert model.config.max_seq_len < 600 + longest  # else this test needs a longer prompt
    return prompt, longest
