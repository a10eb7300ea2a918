"""Train a small masked diffusion LM of our own on the embedded model's tasks (training/batches.py).

    python -m training train --out runs/my-model --minutes 30 --save-every 100
    python -m training train --init-from runs/my-model --out runs/my-model-2 --minutes 30 --stories 0.55

(docs/EMBEDDED_MODEL.md gives the two runs that made assets/sums-and-stories.)

LLaDA's SFT recipe: prompts are never masked; each target token (a response with its end-of-text
padding, and in a k-shot row every worked example's answer) is masked with probability t ~ U(eps, 1),
and the loss is the cross-entropy on masked tokens weighted by 1/t. Additions, each there because it
measurably helped (docs/EMBEDDED_MODEL.md): t stratified over the batch and results hidden together
with their copies (the model must compute a result, not copy it); number embeddings initialised with
value features (12 starts near 13); a share of the batches arithmetic drills, which show each fact
far more often per step than word problems; a share of the story rows cut at a block boundary, later
blocks all masks (the state block-wise decoding is in). Seeded and resumable: each batch is drawn from a
generator seeded by (seed, step), and --resume continues from the state saved every --save-every
steps under --state, so a budget may be spent in several runs.
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

from core.config import ModelConfig
from core.loading import load_model, read_config
from core.model import DiffusionTransformer
from core.tasks.word_problems import NUMBERS, make_split
from training.batches import GEN_LEN, Batch, make_batch, pick_kind, vocabulary
from training.checkpoint import save_own_model
from training.word_tokenizer import build_tokenizer

EPS = 1e-3


def hidden_mask(targets: torch.Tensor, groups: torch.Tensor, gen: torch.Generator):
    """Which target tokens to hide: (by_t, by_group, t).

    by_t is LLaDA's mask, each target hidden with probability t, and t is stratified (one draw in
    each 1/b of [0, 1]) so that every batch spans light and heavy masking. by_group adds, in half
    the rows, whole result groups hidden with probability 1/2: the state the decoder is in when it
    reaches a line's result with the rest of the chain still masked.
    """
    b, n = targets.shape
    t = (1 - EPS) * (torch.arange(b).unsqueeze(1) + torch.rand(b, 1, generator=gen)) / b + EPS
    by_t = (torch.rand(b, n, generator=gen) < t) & targets
    hide = torch.rand(b, int(groups.max()) + 1, generator=gen) < 0.5
    hide[:, 0] = False  # group 0: not a result
    rows = torch.rand(b, 1, generator=gen) < 0.5
    return by_t, torch.gather(hide, 1, groups) & rows, t


def diffusion_loss(model, batch: Batch, mask_id: int, gen: torch.Generator) -> torch.Tensor:
    """Cross-entropy on hidden targets, per target token: weight 1/t for the t-mask (LLaDA's ELBO
    weight), 1 for tokens hidden only by their result group."""
    by_t, by_group, t = hidden_mask(batch.targets, batch.groups, gen)
    hidden = by_t | by_group
    logits = model.full_logits(torch.where(hidden, mask_id, batch.ids), batch.key_mask)
    ce = F.cross_entropy(logits[hidden], batch.ids[hidden], reduction="none")
    weights = torch.where(by_t, 1 / t, 1.0)[hidden]  # row-major, same order as logits[hidden]
    return (ce * weights).sum() / batch.targets.sum()


def value_features(values: torch.Tensor, dim: int) -> torch.Tensor:
    """Unit-norm sin/cos features of integer values, periods spread geometrically from 3 to 300:
    the long periods place numbers on a line (12 is near 13), the short ones keep every number
    distinct. Adding n to a value is then a rotation of these features, which the network can
    learn once for all numbers instead of memorising every sum as an unrelated token pair."""
    periods = torch.logspace(math.log10(3), math.log10(300), dim // 2)
    angles = 2 * math.pi * values.float()[:, None] / periods
    return torch.cat([angles.cos(), angles.sin()], dim=1) / math.sqrt(dim // 2)


@torch.no_grad()
def init_number_rows(model: DiffusionTransformer, number_ids: list[int], mix: float = 0.5) -> None:
    """Start the number tokens' input and output embeddings as a blend of their random init and
    value_features (same norms as the random rows). Initialisation only: the architecture and
    the checkpoint layout are unchanged, and every weight still trains."""
    ids = torch.tensor(number_ids)
    features = value_features(torch.arange(len(number_ids)), model.config.dim)
    for weight in (model.embed.weight, model.lm_head.weight):
        rows = weight[ids]
        norm = rows.norm(dim=1, keepdim=True)
        blended = math.sqrt(1 - mix) * rows / norm + math.sqrt(mix) * features
        weight[ids] = blended / blended.norm(dim=1, keepdim=True) * norm


@torch.no_grad()
def warm_start(model: DiffusionTransformer, tokenizer, folder: Path) -> list[str]:
    """Copy a trained own model's weights into `model`: every layer as it is, and the embedding and
    output rows of each token both tokenizers have (matched by the token, as the vocabularies are
    sorted). Tokens new to `model` keep their fresh init. Returns the new tokens.

    Why: a model that already solves word problems 0-shot only has to learn the k-shot format and the
    stories, instead of learning arithmetic again inside a mixture of three tasks."""
    old, old_tokenizer = load_model(folder)
    shapes = {k: (v.shape, old.state_dict()[k].shape) for k, v in model.state_dict().items()}
    for name, (new_shape, old_shape) in shapes.items():
        if name not in ("embed.weight", "lm_head.weight") and new_shape != old_shape:
            raise ValueError(f"--init-from {folder}: {name} is {tuple(old_shape)} there, {tuple(new_shape)} here")
    rows = old_tokenizer.get_vocab()
    new_tokens = []
    for name, weight in model.state_dict().items():
        source = old.state_dict()[name]
        if name not in ("embed.weight", "lm_head.weight"):
            weight.copy_(source)
            continue
        for token, i in tokenizer.get_vocab().items():
            if token in rows:
                weight[i] = source[rows[token]]
            elif name == "embed.weight":
                new_tokens.append(token)
    return sorted(new_tokens)


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
        json.dumps({"step": step, "elapsed_s": elapsed_s, "args": _flags(args)}, indent=1)
    )


def _flags(args: argparse.Namespace) -> dict:
    """The training flags' values (the command line also keeps its own entries in the namespace)."""
    return {k: v for k, v in vars(args).items() if isinstance(v, int | float | str | bool | None)}


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
    ap.add_argument("--save-every", type=int, default=200)


def run(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Train as the flags say; bad numbers are `ap.error` (exit 2) before anything is built."""
    _check_args(ap, args)

    torch.manual_seed(args.seed)
    # Adam's second moments of rarely used embedding rows decay into denormal floats, which made
    # CPU steps several times slower as training went on.
    torch.set_flush_denormal(True)
    tokenizer = build_tokenizer(vocabulary())
    if args.init_from:  # its architecture, so the weights fit
        try:
            shape, _, _ = read_config(Path(args.init_from))
        except ValueError as e:
            ap.error(f"--init-from: {e}")
        args.dim, args.layers, args.heads, args.ffn = shape.dim, shape.n_layers, shape.n_heads, shape.ffn_dim
    try:
        cfg = ModelConfig(
            vocab_size=len(tokenizer),
            dim=args.dim,
            n_layers=args.layers,
            n_heads=args.heads,
            ffn_dim=args.ffn,
            mask_token_id=tokenizer.mask_token_id,
            eos_token_ids=(tokenizer.eos_token_id,),
            max_seq_len=1024,  # an 8-shot prompt (~700 tokens) and a 256-token canvas
            gen_len=GEN_LEN,
            block_len=32,
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
    state_dir = Path(args.state)
    start, elapsed = load_state(state_dir, model, opt) if args.resume else (0, 0.0)
    held_out = frozenset(p.prompt for p in make_split("test", 1000))
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"{n_params / 1e6:.1f}M parameters, vocab {cfg.vocab_size}, step {start} of {args.steps}, "
        f"{elapsed / 60:.1f} of {args.minutes:g} minutes used"
    )

    # The learning-rate schedule runs on whichever ends first, steps or the time budget, so a
    # slower machine still finishes its cosine decay inside the budget.
    budget_s = args.minutes * 60
    started = time.monotonic()
    t0 = started - elapsed
    done, ema = start, None
    bar = tqdm(range(start, min(args.steps, args.until or args.steps)), initial=start, total=args.steps, desc="train")
    for step in bar:
        progress = max(step / args.steps, (time.monotonic() - t0) / budget_s)
        if progress >= 1:
            print(f"time budget of {args.minutes:g} min reached at step {step}")
            break
        if args.pause_after is not None and time.monotonic() - started > args.pause_after * 60:
            print(f"paused after {args.pause_after:g} min at step {step}: continue with --resume")
            break
        rng = random.Random(args.seed * 1_000_003 + step)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        kind, shots, canvas = pick_kind(rng, args.stories, args.drills, args.long_words)
        batch = make_batch(tokenizer, rng, args.batch_tokens, kind, shots, held_out, canvas, args.block_prefix)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, progress, args.lr, args.warmup)
        with torch.autocast("cpu", dtype=torch.bfloat16):
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
    save_state(state_dir, model, opt, done, time.monotonic() - t0, args)
    print(f"trained {done} steps in {(time.monotonic() - t0) / 60:.1f} minutes")
    save_own_model(model, tokenizer, Path(args.out))
    print(f"saved {args.out}")
    return 0


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse bad numbers before anything is built or saved (argparse's 'error: ...', exit 2)."""
    counts = {"--steps": args.steps, "--batch-tokens": args.batch_tokens, "--dim": args.dim, "--layers": args.layers}
    counts |= {"--heads": args.heads, "--ffn": args.ffn, "--save-every": args.save_every}
    if args.until is not None:
        counts["--until"] = args.until
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
              "--long-words": args.long_words, "--block-prefix": args.block_prefix}
    for flag, share in shares.items():
        if not 0 <= share <= 1:  # a share above 1 would make the number init NaN, or every batch a drill
            ap.error(f"{flag} must be a share in [0, 1], got {share:g}")
    if args.drills + args.stories > 1:
        ap.error(f"--drills + --stories must be at most 1, got {args.drills + args.stories:g}")

