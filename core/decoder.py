"""The semi-autoregressive masked-diffusion loop, as a generator of one event per step.

The response starts as `gen_len` mask tokens, split into blocks decoded left to right. Each step:
the policy names the rows to compute, the model runs them against the KV cache, the most confident
masked positions of the block are unmasked, and the policy is told how uncertain they were. The
host's copy of the sequence is core/canvas.py's, a step's timing core/step_clock.py's.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple

import torch

from core.canvas import Canvas
from core.config import DecodeConfig
from core.device import gc_paused
from core.events import StepEvent, Totals
from core.exact_passes import Passes, index_tensor
from core.kv_cache import KVCache
from core.layerwise import LayerHook
from core.model import DiffusionTransformer
from core.passes import passes_for
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.sampling import block_noise, choose, entropy
from core.step_clock import StepClock, StepTimes

PromptIds = Sequence[int] | torch.Tensor
StepHook = Callable[[torch.Tensor, KVCache, StepContext], dict]


def _check_prompt(model: DiffusionTransformer, prompt_ids: PromptIds, gen_len: int) -> list[int]:
    raw = prompt_ids.flatten().tolist() if torch.is_tensor(prompt_ids) else list(prompt_ids)
    if any(not isinstance(t, int) or isinstance(t, bool) for t in raw):
        raise ValueError("prompt token ids must be integers")
    ids = [int(t) for t in raw]
    cfg = model.config
    if not ids:
        raise ValueError("the prompt is empty")
    bad = [t for t in ids if not 0 <= t < cfg.vocab_size]
    if bad:
        raise ValueError(f"prompt token id {bad[0]} outside the vocabulary (size {cfg.vocab_size})")
    if len(ids) + gen_len > cfg.max_seq_len:
        raise ValueError(f"prompt ({len(ids)}) + gen_len ({gen_len}) exceeds the model's {cfg.max_seq_len} positions")
    return ids


class _Step(NamedTuple):
    """What one step computed, as the StepEvent fields it fills; the loop adds the response, the
    totals, the flags and the step's times."""

    reason: str  # the plan's, with what its layer hook found during the forward
    full: bool  # every row at every layer
    rows: list[int]
    layer_rows: list[int]
    unmasked: list[int]
    unmasked_tokens: list[int]
    entropies: list[float]
    max_entropy: float
    confidences: list[float]


def decode(model: DiffusionTransformer, prompt_ids: PromptIds, policy: CachePolicy, config: DecodeConfig | None = None,
           before_step: StepHook | None = None) -> Iterator[StepEvent]:
    """Decode one prompt; yield a StepEvent per step, the last one with done=True and the totals.

    Without a config, the model's own gen and block length (DecodeConfig.for_model). before_step(tokens,
    cache, ctx), if given, runs before each step, outside its timing, and returns fields for that step's
    event (evaluation.diagnostics.Probe measures the cache's drift this way)."""
    config = DecodeConfig.for_model(model.config) if config is None else config
    prompt = _check_prompt(model, prompt_ids, config.gen_len)
    with passes_for(model, len(prompt) + config.gen_len, config.block_size, config.graphs) as passes:
        yield from _steps(model, prompt, policy, config, before_step, passes)


def _steps(model: DiffusionTransformer, prompt: list[int], policy: CachePolicy, config: DecodeConfig,
           before_step: StepHook | None, passes: Passes) -> Iterator[StepEvent]:
    cfg, p, length = model.config, len(prompt), passes.length
    canvas = Canvas(prompt, config.gen_len, cfg.mask_token_id, cfg.eos_token_ids)
    passes.start(prompt)
    policy.reset()
    totals, step = Totals(), 0
    schedule = config.transfers()  # every block's, in full: the dream schedule's is the one block's
    for block in range(config.n_blocks):
        start = p + block * config.block_size
        end, block_step = start + config.block_size, 0
        while block_masked := canvas.masked(start, end):
            ctx = StepContext(step, block, block_step, start, end, p, length, block_masked,
                              tuple(canvas.decode_order), cfg.logit_shift)
            measured = before_step(passes.tokens, passes.cache, ctx) if before_step else {}
            n_transfer = None if config.threshold is not None else schedule[block_step]
            with gc_paused():  # a collection's cost is the whole process's, not the step's (core/device.py)
                result, times = _step(model, passes, ctx, policy, n_transfer, config)
            canvas.write(result.unmasked, result.unmasked_tokens)
            done = config.stop_at_eos and canvas.finish_at_eos(passes.tokens)
            response = canvas.response
            totals += Totals(1, int(result.full), sum(result.layer_rows), length * cfg.n_layers, times.compute_s,
                             times.decision_s, capture_s=times.capture_s)
            totals.tokens = canvas.generated(response)
            last = done or (block == config.n_blocks - 1 and cfg.mask_token_id not in response)
            yield StepEvent(step=step, block=block, prompt_len=p, tokens=response, totals=replace(totals), done=last,
                            block_done=cfg.mask_token_id not in response[start - p : end - p], **result._asdict(),
                            **times._asdict(), **measured)
            step, block_step = step + 1, block_step + 1
            if done:
                return


@torch.no_grad()
def _step(model: DiffusionTransformer, passes: Passes, ctx: StepContext, policy: CachePolicy, n_transfer: int | None,
          config: DecodeConfig) -> tuple[_Step, StepTimes]:
    device, clock = passes.device, StepClock(passes)
    plan = policy.plan(ctx)
    clock.planned()
    hook = plan.hook
    # Dream reads position i's logits at row i-1. The prompt is never empty, so these rows are
    # distinct, sorted and one per masked position, in the order of block_masked.
    needed = [pos - ctx.logit_shift for pos in ctx.block_masked]
    rows = _rows_planned(plan, needed, ctx.length)
    logits = clock.forward(passes.run, model, rows, needed, hook)
    layer_rows, rows = _rows_computed(hook, rows, ctx.length, model.config.n_layers)
    # Probabilities over the whole vocabulary, as every reference has them; the mask token is only
    # never an answer: a model that ranks it first (an untrained one can) would otherwise "unmask" a
    # position into a mask, and the block would never finish.
    picked, tokens, confidences, probs = choose(logits, n_transfer, config.threshold, config.temperature,
                                                _noise(config, ctx, logits.shape[-1], device),
                                                mask_id=model.config.mask_token_id, top_p=config.top_p,
                                                top_k=config.top_k, alg=config.alg)
    masked = index_tensor(ctx.block_masked, device)
    passes.tokens.index_copy_(0, masked, torch.where(picked, tokens, passes.tokens[masked]))
    read = [picked.double(), tokens.double(), confidences.double()]
    if passes.entropies_in_readout:  # every masked row's entropy, issued now: one wait instead of two
        read.append(clock.on_host(lambda: entropy(probs).double()))  # the decision's, riding with the choice
    # The step's wait for the device before the decision: what was picked, as what, how surely.
    picked, tokens, confidences, *every_entropy = torch.stack(read).tolist()
    slots = [i for i, flag in enumerate(picked) if flag]
    unmasked = tuple(ctx.block_masked[i] for i in slots)
    clock.read_out()  # the device is done: the forward's time is the model's, not the decision's
    if every_entropy:
        entropies = tuple(every_entropy[0][i] for i in slots)
    else:
        entropies = tuple(entropy(probs[index_tensor(slots, device)]).tolist())
    policy.observe(ctx, Outcome(unmasked, entropies))  # tuples: a policy cannot edit what the event reports
    times = clock.stop(hook)
    reason = plan.reason if hook is None or not hook.note else f"{plan.reason}; {hook.note}"
    return _Step(reason=reason, full=rows is None, rows=list(range(ctx.length)) if rows is None else rows,
                 layer_rows=layer_rows, unmasked=list(unmasked), unmasked_tokens=[int(tokens[i]) for i in slots],
                 entropies=list(entropies), max_entropy=max(entropies, default=0.0),
                 confidences=[confidences[i] for i in slots]), times


def _rows_planned(plan: Plan, needed: list[int], length: int) -> list[int] | None:
    """The rows the pass computes at every layer: None for every row, and where a stream hook chooses
    each layer's rows itself."""
    if plan.rows is None or (plan.hook is not None and plan.hook.stream):
        return None
    return _rows_to_compute(plan, needed, length)


def _rows_computed(hook: LayerHook | None, rows: list[int] | None, length: int,
                   n_layers: int) -> tuple[list[int], list[int] | None]:
    """(the rows computed at each layer, the rows computed at any layer: None when every layer computed
    every row), once the pass is done."""
    if hook is None:
        return [length if rows is None else len(rows)] * n_layers, rows
    if not hook.stream:
        return hook.layer_rows, rows
    return hook.layer_rows, None if min(hook.layer_rows) == length else hook.computed.nonzero().flatten().tolist()


def _noise(config: DecodeConfig, ctx: StepContext, vocab: int, device: torch.device) -> torch.Tensor | None:
    """The Gumbel noise of the rows of the block's masked positions (core/sampling.py says why); None
    when decoding is greedy."""
    if not config.temperature:
        return None
    block = block_noise(config.seed, ctx.block, ctx.block_step, ctx.block_end - ctx.block_start, vocab, device)
    return block[index_tensor([pos - ctx.block_start for pos in ctx.block_masked], device)]


def _rows_to_compute(plan: Plan, needed: list[int], length: int) -> list[int]:
    """The plan's rows plus the rows whose logits are needed, sorted, each once."""
    try:  # operator.index: ints of any kind (numpy, 0-d tensors) as plain ints; floats refused
        rows = sorted({operator.index(row) for row in plan.rows}.union(needed))
    except TypeError:
        raise ValueError(f"the policy's rows must be integer positions, got {plan.rows!r}") from None
    if rows[0] < 0 or rows[-1] >= length:
        bad = rows[0] if rows[0] < 0 else rows[-1]
        raise ValueError(f"the policy planned row {bad}, outside the sequence's rows 0..{length - 1}")
    return rows


def generate(model: DiffusionTransformer, prompt_ids: PromptIds, policy: CachePolicy,
             config: DecodeConfig | None = None) -> StepEvent:
    """Run `decode` to the end and return its last event (without a config: the model's lengths)."""
    return deque(decode(model, prompt_ids, policy, config), maxlen=1)[0]
