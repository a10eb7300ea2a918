r"""Command line: decode one prompt and print the answer and a one-line summary.

python -m core.generate --prompt \
    "mia has 7 marbles . mia buys 10 more marbles . then mia doubles the marbles . how many marbles does mia have now ?"
python -m core.generate --model GSAI-ML/LLaDA-8B-Instruct --device cuda --prompt "..." --policy entropy --tau 0.5 -k 2
"""

from __future__ import annotations

import argparse
import sys

from core.cli_args import check_before_load, decode_config, torch_dtype
from core.decoder import generate
from core.loading import answer_text, chat_prompt_ids, load_model
from core.policies import POLICIES, make_policy
from core.policies.entropy import DEFAULT_K, DEFAULT_TAU


def policy_params(args: argparse.Namespace) -> dict:
    if args.policy == "entropy":
        return {"tau": args.tau, "k": args.k}
    if args.policy == "periodic":
        return {"prompt_every": args.prompt_every, "response_every": args.response_every}
    return {}


def add_decode_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default=None, help="checkpoint folder, hub id, 'llada', 'dream' (default: embedded)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--gen-len", type=int, default=None, help="response length (default: the model's)")
    ap.add_argument("--block", type=int, default=None, help="block length (default: the model's)")
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (default: one token per step)")
    ap.add_argument("--threshold", type=float, default=None, help="parallel decoding confidence threshold")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tau", type=float, default=DEFAULT_TAU, help="entropy threshold for a full recompute")
    ap.add_argument("-k", type=int, default=DEFAULT_K, help="recently decoded rows always recomputed")
    ap.add_argument("--prompt-every", type=int, default=50)
    ap.add_argument("--response-every", type=int, default=5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--policy", default="entropy", choices=sorted(POLICIES))
    add_decode_args(ap)
    args = ap.parse_args(argv)
    try:
        policy = make_policy(args.policy, **policy_params(args))
        settings = dict(steps=args.steps, threshold=args.threshold, temperature=args.temperature, seed=args.seed)
        check_before_load(args.gen_len, args.block, **settings)
        model, tokenizer = load_model(args.model, device=args.device, dtype=torch_dtype(args.dtype))
        config = decode_config(model, args.gen_len, args.block, **settings)
        prompt = chat_prompt_ids(tokenizer, args.prompt)
        last = generate(model, prompt, policy, config)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t = last.totals
    print(answer_text(tokenizer, last))
    print(
        f"[{policy.describe()}] steps {t.steps}, full steps {t.full_steps}, "
        f"rows computed {t.rows_fraction:.1%} of full, time {t.compute_s:.3f}s, {t.tokens_per_s:.1f} tokens/s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
