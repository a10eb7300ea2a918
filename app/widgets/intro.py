"""A tab's opening: a few short lines a visitor reads first, and how the tab works folded under them, so
that the inputs and the Run button stay on the first screen."""

from __future__ import annotations

import gradio as gr


def tab_intro(intro: str, how_it_works: str, fold_id: str) -> None:
    """`intro` in view, `how_it_works` in a closed fold named "How it works" (element id `fold_id`)."""
    gr.Markdown(intro)
    with gr.Accordion("How it works", open=False, elem_id=fold_id):
        gr.Markdown(how_it_works)
