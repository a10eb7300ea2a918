"""`python -m evaluation generate`: decode one prompt; print the answer and a one-line summary."""

from __future__ import annotations

import argparse
import sys

from core.config import DecodeConfig
from core.decoder import generate
from core.loading import UnknownWordsError, answer_text, chat_prompt_ids
from core.policies import make_policy
from evaluation.cli.flags import decode_settings, load_from_flags, policy_params
from evaluation.tasks.word_problems import example_prompt


def run(args: argparse.Namespace) -> int:
    policy = make_policy(args.policy, **policy_params(args.policy, args))
    settings = decode_settings(args)
    model, tokenizer = load_from_flags(args)
    config = DecodeConfig.for_model(model.config, **settings)
    try:
        prompt = chat_prompt_ids(tokenizer, args.prompt)
    except UnknownWordsError as e:  # only our word-level models have unknown words
        raise ValueError(f"{e}. The embedded model was trained only on word problems, e.g.:\n"
                         f"  python -m evaluation generate --prompt \"{example_prompt()}\"") from None
    last = generate(model, prompt, policy, config)
    t = last.totals
    print(answer_text(tokenizer, last))
    print(
        f"[{policy.describe()}] steps {t.steps}, full steps {t.full_steps}, "
        f"rows computed {t.rows_fraction:.1%} of full, time {t.compute_s:.3f}s, {t.tokens_per_s:.1f} tokens/s"
        + (f", CUDA graphs captured in {t.capture_s:.2f}s (not in the time)" if t.capture_s else ""),
        file=sys.stderr,
    )
    return 0
