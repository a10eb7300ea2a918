"""Train the embedded default model: a small masked diffusion LM on the word-problem task.

    python -m core.train --out assets/wordproblems-diffusion --minutes 55

LLaDA's SFT recipe: the prompt is never masked; each response token (the worked answer followed by
end-of-text padding up to gen_len) is masked with probability t ~ U(eps, 1), and the loss is the
cross-entropy on masked tokens weighted by 1/t. Seeded and resumable: each batch is drawn from a
generator seeded by (seed, step), and --resume continues from the state saved every --save-every
steps under --state.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from core.checkpoint import save_own_model
from core.config import ModelConfig
from core.loading import chat_prompt_ids
from core.model import DiffusionTransformer
from core.task import ITEMS, NAMES, NUMBERS, WORDS, make_problem, make_split
from core.word_tokenizer import build_tokenizer

GEN_LEN = 64  # response length the model is trained (and decoded) with
EPS = 1e-3


def make_batch(tokenizer, rng: random.Random, batch: int, held_out: set[str]):
    """Left-padded prompts + responses padded with end-of-text to GEN_LEN."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    pairs = []
    while len(pairs) < batch:
        prob = make_problem(rng)
        if prob.prompt in held_out:
            continue
        answer = tokenizer(prob.answer_text, add_special_tokens=False)["input_ids"]
        pairs.append((chat_prompt_ids(tokenizer, prob.prompt), (answer + [eos] * GEN_LEN)[:GEN_LEN]))
    width = max(len(p) for p, _ in pairs)
    ids = torch.full((batch, width + GEN_LEN), pad, dtype=torch.long)
    for i, (p, a) in enumerate(pairs):
        ids[i, width - len(p) : width] = torch.tensor(p)
        ids[i, width:] = torch.tensor(a)
    return ids, ids != pad, width


def diffusion_loss(model, ids, key_mask, response_start: int, mask_id: int, gen: torch.Generator):
    b = ids.shape[0]
    t = (1 - EPS) * torch.rand(b, 1, generator=gen) + EPS
    masked = torch.zeros_like(ids, dtype=torch.bool)
    masked[:, response_start:] = torch.rand(b, ids.shape[1] - response_start, generator=gen) < t
    noisy = torch.where(masked, mask_id, ids)
    logits = model.full_logits(noisy, key_mask)
    ce = F.cross_entropy(logits[masked], ids[masked], reduction="none")
    weights = (1 / t).expand_as(masked)[masked]
    return (ce * weights).sum() / (b * (ids.shape[1] - response_start))


def lr_at(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% over `progress` (0..1) of the run."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def save_state(state_dir: Path, model, opt, step: int, elapsed_s: float, args) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, state_dir / "model.safetensors")
    moments = {}
    for i, p in enumerate(model.parameters()):
        s = opt.state.get(p, {})
        if s:
            moments[f"{i}.exp_avg"], moments[f"{i}.exp_avg_sq"] = s["exp_avg"], s["exp_avg_sq"]
    save_file(moments, state_dir / "optimizer.safetensors")
    (state_dir / "state.json").write_text(
        json.dumps({"step": step, "elapsed_s": elapsed_s, "args": vars(args)}, indent=1)
    )


def load_state(state_dir: Path, model, opt) -> tuple[int, float]:
    model.load_state_dict(load_file(state_dir / "model.safetensors"))
    moments = load_file(state_dir / "optimizer.safetensors")
    state = json.loads((state_dir / "state.json").read_text())
    step = state["step"]
    for i, p in enumerate(model.parameters()):
        if f"{i}.exp_avg" in moments:
            opt.state[p] = {
                "step": torch.tensor(float(step)),
                "exp_avg": moments[f"{i}.exp_avg"],
                "exp_avg_sq": moments[f"{i}.exp_avg_sq"],
            }
    return step, state.get("elapsed_s", 0.0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="assets/wordproblems-diffusion")
    ap.add_argument("--state", default="runs/train-state", help="where resumable training state is kept")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--minutes", type=float, default=60.0, help="stop (and save) after this much wall time")
    ap.add_argument("--until", type=int, default=None, help="pause (and save) after this step; resume later")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-every", type=int, default=200)
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    # Adam's second moments of rarely used embedding rows decay into denormal floats, which made
    # CPU steps several times slower as training went on.
    torch.set_flush_denormal(True)
    tokenizer = build_tokenizer(NAMES + ITEMS + NUMBERS + WORDS)
    cfg = ModelConfig(
        vocab_size=len(tokenizer),
        dim=args.dim,
        n_layers=args.layers,
        n_heads=args.heads,
        ffn_dim=args.ffn,
        mask_token_id=tokenizer.mask_token_id,
        eos_token_ids=(tokenizer.eos_token_id,),
        max_seq_len=512,
    )
    model = DiffusionTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    state_dir = Path(args.state)
    start, elapsed = load_state(state_dir, model, opt) if args.resume else (0, 0.0)
    held_out = {p.prompt for p in make_split("test", 1000)}
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"{n_params / 1e6:.1f}M parameters, vocab {cfg.vocab_size}, step {start} of {args.steps}, "
        f"{elapsed / 60:.1f} of {args.minutes:g} minutes used"
    )

    # The learning-rate schedule runs on whichever ends first, steps or the time budget, so a
    # slower machine still finishes its cosine decay inside the budget.
    budget_s = args.minutes * 60
    t0 = time.monotonic() - elapsed
    done, ema = start, None
    bar = tqdm(range(start, min(args.steps, args.until or args.steps)), initial=start, total=args.steps, desc="train")
    for step in bar:
        progress = max(step / args.steps, (time.monotonic() - t0) / budget_s)
        if progress >= 1:
            print(f"time budget of {args.minutes:g} min reached at step {step}")
            break
        rng = random.Random(args.seed * 1_000_003 + step)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        ids, key_mask, width = make_batch(tokenizer, rng, args.batch, held_out)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, progress, args.lr, args.warmup)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = diffusion_loss(model, ids, key_mask, width, cfg.mask_token_id, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{ema:.3f}", lr=f"{opt.param_groups[0]['lr']:.1e}")
        if done % args.save_every == 0:
            save_state(state_dir, model, opt, done, time.monotonic() - t0, args)
    save_state(state_dir, model, opt, done, time.monotonic() - t0, args)
    print(f"trained {done} steps in {(time.monotonic() - t0) / 60:.1f} minutes")
    save_own_model(model, tokenizer, Path(args.out), decode_defaults={"gen_len": GEN_LEN, "block_len": 32})
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
