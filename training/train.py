"""Train a small masked diffusion LM of our own on the embedded model's tasks (training/batches.py).

    python -m training train --out runs/my-model --minutes 30 --save-every 100
    python -m training train --init-from runs/my-model --out runs/my-model-2 --minutes 30 --stories 0.55

(The two runs that made assets/sums-and-stories are a recipe, training/recipes.py:
`python -m training recipe sums-and-stories --out runs/sums-and-stories`.)

LLaDA's SFT recipe: prompts are never masked; each target token (a response with its end-of-text
padding, and in a k-shot row every worked example's answer) is masked with probability t ~ U(eps, 1),
and the loss is the cross-entropy on masked tokens weighted by 1/t. Additions, each there because it
measurably helped (docs/EMBEDDED_MODEL.md): t stratified over the batch and results hidden together
with their copies (the model must compute a result, not copy it); number embeddings initialised with
value features (12 starts near 13); a share of the batches (or of each batch's rows) arithmetic drills,
which show each fact far more often per step than word problems; a share of the story rows cut at a
block boundary, later blocks all masks (the state block-wise decoding is in). Seeded and resumable:
each batch is drawn from a generator seeded by (seed, step), and --resume continues from the state
saved every --save-every steps under --state, so a budget may be spent in several runs.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from core.config import DecodeConfig, ModelConfig
from core.loading import read_config
from core.model import DiffusionTransformer
from evaluation.outputs import unwritable
from evaluation.tasks.word_problems import NUMBERS, make_split
from training.batches import GEN_LEN, MAX_SHOTS, VOCABULARIES, make_batch, pick_kind, vocabulary
from training.checkpoint import save_own_model
from training.init_weights import init_number_rows, warm_start
from training.objective import diffusion_loss
from training.state import changed_setting, load_state, save_state, saved_state
from training.word_tokenizer import build_tokenizer


def lr_at(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% over `progress` (0..1) of the run."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The training flags (`python -m training train`, training/cli.py)."""
    ap.add_argument("--out", default="runs/model", help="checkpoint folder (never the shipped model unless named)")
    ap.add_argument("--state", default="runs/train-state", help="where resumable training state is kept")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--minutes", type=float, default=120.0,
                    help="the whole run's time budget, over every --resume (the schedule decays over it)")
    ap.add_argument("--pause-after", type=float, default=None,
                    help="minutes: pause (and save) this run after this much wall time; resume later")
    ap.add_argument("--until", type=int, default=None, help="pause (and save) after this step; resume later")
    ap.add_argument("--batch-tokens", type=int, default=8192, help="tokens per batch (rows of one kind)")
    ap.add_argument("--batch-rows", type=int, default=None, help="rows per batch instead of --batch-tokens")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--init-from", default=None,
                    help="start from this own model's weights and architecture (--dim etc. are then its own)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--number-init", type=float, default=0.5, help="value-feature share of number embeddings at init")
    ap.add_argument("--drills", type=float, default=0.2, help="share of batches that are arithmetic drills")
    ap.add_argument("--stories", type=float, default=0.25, help="share of batches that are stories")
    ap.add_argument("--block-prefix", type=float, default=0.0,
                    help="share of story rows cut at a block boundary, later blocks all masks and out of the loss")
    ap.add_argument("--long-words", type=float, default=0.25,
                    help="share of word-problem batches on the full canvas (the rest on a 64-token one)")
    ap.add_argument("--drill-rows", type=float, default=0.0,
                    help="share of the rows of a word-problem batch that are drills (drills mixed row by row)")
    ap.add_argument("--max-shots", type=int, default=MAX_SHOTS,
                    help=f"most worked examples before a word problem, 0 to {MAX_SHOTS} (0: each asked alone)")
    ap.add_argument("--vocabulary", default="all", choices=list(VOCABULARIES),
                    help="the tokenizer's words: every task's, or only those of word problems asked alone and drills")
    ap.add_argument("--gen-len", type=int, default=GEN_LEN, help="the decode default saved in config.json")
    ap.add_argument("--story-temperature", type=float, default=0.0,
                    help="the sampling temperature config.json declares for the stories task (0: greedy, "
                         "nothing declared); core.config.DecodeConfig.for_model applies it to stories")
    ap.add_argument("--max-seq-len", type=int, default=1024,
                    help="positions the model declares (1024: an 8-shot prompt, ~700 tokens, and a 256-token canvas)")
    ap.add_argument("--save-every", type=int, default=200)


def run(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Train as the flags say; bad numbers are `ap.error` (exit 2) before anything is built."""
    _check_args(ap, args)

    torch.manual_seed(args.seed)
    # Adam's second moments of rarely used embedding rows decay into denormal floats, which made
    # CPU steps several times slower as training went on.
    torch.set_flush_denormal(True)
    tokenizer = build_tokenizer(vocabulary(args.vocabulary))
    if args.init_from:  # its architecture, so the weights fit
        try:
            shape, _, _ = read_config(Path(args.init_from))
        except ValueError as e:
            ap.error(f"--init-from: {e}")
        args.dim, args.layers, args.heads, args.ffn = shape.dim, shape.n_layers, shape.n_heads, shape.ffn_dim
    state_dir = Path(args.state)
    # Here, where the flags are final (an --init-from model's shape is the run's), before the model is built.
    if args.resume and (change := changed_setting(saved_state(state_dir)["args"], args)):
        ap.error(f"--resume: {state_dir} {change}: resume with the flags it was started with, or pass another --state")
    try:
        cfg = ModelConfig(
            vocab_size=len(tokenizer),
            dim=args.dim,
            n_layers=args.layers,
            n_heads=args.heads,
            ffn_dim=args.ffn,
            mask_token_id=tokenizer.mask_token_id,
            eos_token_ids=(tokenizer.eos_token_id,),
            max_seq_len=args.max_seq_len,
            gen_len=args.gen_len,
            block_len=32,
            task_settings={"stories": {"temperature": args.story_temperature}} if args.story_temperature else {},
        )
    except ValueError as e:  # e.g. --dim not divisible by --heads
        ap.error(str(e))
    model = DiffusionTransformer(cfg)
    if args.init_from and not args.resume:
        new = warm_start(model, tokenizer, Path(args.init_from))
        print(f"weights from {args.init_from}; {len(new)} new tokens start from a fresh init")
    elif args.number_init > 0:
        init_number_rows(model, tokenizer.convert_tokens_to_ids(NUMBERS), args.number_init)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    try:
        start, elapsed = load_state(state_dir, model, opt) if args.resume else (0, 0.0)
    except (RuntimeError, KeyError, OSError) as e:  # e.g. a state saved by a run of another --dim
        ap.error(f"--resume: the state in {state_dir} does not fit this run ({str(e).splitlines()[0]}); resume with "
                 "the flags it was started with, or pass another --state")
    held_out = frozenset(p.prompt for p in make_split("test", 1000))
    n_params = sum(p.numel() for p in model.parameters())
    bf16 = native_bfloat16()
    print(
        f"{n_params / 1e6:.1f}M parameters, vocab {cfg.vocab_size}, step {start} of {args.steps}, "
        f"{elapsed / 60:.1f} of {args.minutes:g} minutes used, "
        + ("bfloat16 autocast" if bf16 else "float32 (this CPU has no bfloat16 arithmetic of its own)")
    )

    # The learning-rate schedule runs on whichever ends first, steps or the time budget, so a
    # slower machine still finishes its cosine decay inside the budget.
    budget_s = args.minutes * 60
    started = time.monotonic()
    t0 = started - elapsed
    done, ema, out_of_time = start, None, False
    bar = tqdm(range(start, min(args.steps, args.until or args.steps)), initial=start, total=args.steps, desc="train")
    for step in bar:
        progress = max(step / args.steps, (time.monotonic() - t0) / budget_s)
        if progress >= 1:
            print(f"time budget of {args.minutes:g} min reached at step {step}")
            out_of_time = True
            break
        if args.pause_after is not None and time.monotonic() - started > args.pause_after * 60:
            print(f"paused after {args.pause_after:g} min at step {step}: continue with --resume")
            break
        rng = random.Random(args.seed * 1_000_003 + step)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        kind, shots, canvas = pick_kind(rng, args.stories, args.drills, args.long_words, args.max_shots)
        batch = make_batch(tokenizer, rng, args.batch_tokens, kind, shots, held_out, canvas, args.block_prefix,
                           args.batch_rows, args.drill_rows)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, progress, args.lr, args.warmup)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = diffusion_loss(model, batch, cfg.mask_token_id, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{ema:.3f}", lr=f"{opt.param_groups[0]['lr']:.1e}")
        if done % args.save_every == 0:
            save_state(state_dir, model, opt, done, time.monotonic() - t0, args)
    save_state(state_dir, model, opt, done, time.monotonic() - t0, args, finished=out_of_time or done >= args.steps)
    print(f"trained {done} steps in {(time.monotonic() - t0) / 60:.1f} minutes")
    save_own_model(model, tokenizer, Path(args.out))
    print(f"saved {args.out}")
    return 0


def native_bfloat16() -> bool:
    """Whether steps run under bfloat16 autocast: where the CPU multiplies bfloat16 itself (AVX512-BF16,
    AMX), which is where it is faster than float32. Elsewhere oneDNN emulates it, and the backward of
    a step of the recipe's shape took 50x float32's (92 s against 1.8 s on an AVX2 CPU), so steps run
    in float32; the saved weights are bfloat16 either way (training/checkpoint.py)."""
    return torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse bad numbers before anything is built or saved (argparse's 'error: ...', exit 2)."""
    counts = {"--steps": args.steps, "--batch-tokens": args.batch_tokens, "--dim": args.dim, "--layers": args.layers}
    counts |= {"--heads": args.heads, "--ffn": args.ffn, "--save-every": args.save_every}
    counts |= {"--gen-len": args.gen_len, "--max-seq-len": args.max_seq_len}
    for flag, n in (("--until", args.until), ("--batch-rows", args.batch_rows)):
        if n is not None:
            counts[flag] = n
    for flag, n in counts.items():
        if n < 1:
            ap.error(f"{flag} must be a positive integer, got {n}")
    if args.warmup < 0:
        ap.error(f"--warmup must be a non-negative integer, got {args.warmup}")
    if not args.minutes > 0:  # inf is fine: no time limit
        ap.error(f"--minutes must be a positive number, got {args.minutes:g}")
    if args.pause_after is not None and not args.pause_after > 0:
        ap.error(f"--pause-after must be a positive number, got {args.pause_after:g}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        ap.error(f"--lr must be a positive number, got {args.lr:g}")
    shares = {"--number-init": args.number_init, "--drills": args.drills, "--stories": args.stories,
              "--long-words": args.long_words, "--block-prefix": args.block_prefix, "--drill-rows": args.drill_rows}
    for flag, share in shares.items():
        if not 0 <= share <= 1:  # a share above 1 would make the number init NaN, or every batch a drill
            ap.error(f"{flag} must be a share in [0, 1], got {share:g}")
    if args.drills + args.stories > 1:
        ap.error(f"--drills + --stories must be at most 1, got {args.drills + args.stories:g}")
    if not 0 <= args.max_shots <= MAX_SHOTS:
        ap.error(f"--max-shots must be in [0, {MAX_SHOTS}], got {args.max_shots}")
    try:  # a temperature the decoder takes (DecodeConfig's declaration)
        DecodeConfig(temperature=args.story_temperature)
    except ValueError as e:
        ap.error(f"--story-{e}")
    if args.gen_len > args.max_seq_len:
        ap.error(f"--gen-len {args.gen_len} does not fit --max-seq-len {args.max_seq_len}")
    if args.vocabulary == "words-0-shot" and (args.stories or args.max_shots):
        ap.error("--vocabulary words-0-shot has no story words and no worked-example frame: "
                 "use it with --stories 0 --max-shots 0")
    # Before the training, which would otherwise be lost at its first save.
    for flag, folder in (("--out", args.out), ("--state", args.state)):
        if problem := unwritable(folder, folder=True):
            ap.error(f"{flag} {folder!r}: {problem}")
    if args.resume and not (Path(args.state) / "state.json").exists():
        ap.error(f"--resume: {args.state} holds no saved state (no state.json)")

