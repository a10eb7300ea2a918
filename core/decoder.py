"""The semi-autoregressive masked-diffusion loop, as a generator of one event per step.

The response starts as `gen_len` mask tokens, split into blocks decoded left to right. Each step:
the policy names the rows to compute, the model runs them against the KV cache, the most confident
masked positions of the block are unmasked, and the policy is told how uncertain they were.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple

import torch

from core.config import DecodeConfig
from core.device import Span, clock, gc_paused, host_clock
from core.events import StepEvent, Totals
from core.kv_cache import KVCache
from core.model import DiffusionTransformer
from core.passes import Passes, index_tensor, passes_for
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.sampling import block_noise, choose, entropy


def _check_prompt(model: DiffusionTransformer, prompt_ids: Sequence[int] | torch.Tensor, gen_len: int) -> list[int]:
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


StepHook = Callable[[torch.Tensor, KVCache, StepContext], dict]


class _Step(NamedTuple):
    """What one step computed, as the StepEvent fields it fills; the loop adds the response, the
    totals and the flags."""

    reason: str  # the plan's, with what its layer hook found during the forward
    full: bool  # every row at every layer
    rows: list[int]
    layer_rows: list[int]
    unmasked: list[int]
    unmasked_tokens: list[int]
    entropies: list[float]
    max_entropy: float
    confidences: list[float]
    compute_s: float
    forward_s: float
    choice_s: float
    decision_s: float
    capture_s: float


def decode(
    model: DiffusionTransformer,
    prompt_ids: Sequence[int] | torch.Tensor,
    policy: CachePolicy,
    config: DecodeConfig | None = None,
    before_step: StepHook | None = None,
) -> Iterator[StepEvent]:
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
    cfg = model.config
    p, length = len(prompt), passes.length
    mask_id, eos = cfg.mask_token_id, set(cfg.eos_token_ids)
    passes.start(prompt)
    sequence = prompt + [mask_id] * config.gen_len  # the host's copy of passes.tokens: read without a device sync
    decode_order: list[int] = []
    policy.reset()
    totals = Totals()
    n_blocks, size = config.n_blocks, config.block_size
    schedule = config.transfers()  # every block's, in full: the dream schedule's is the one block's

    step = 0
    for block in range(n_blocks):
        start = p + block * size
        end = start + size
        block_step = 0
        while block_masked := tuple(pos for pos in range(start, end) if sequence[pos] == mask_id):
            ctx = StepContext(step, block, block_step, start, end, p, length, block_masked, tuple(decode_order),
                              cfg.logit_shift)
            measured = before_step(passes.tokens, passes.cache, ctx) if before_step else {}
            n_transfer = None if config.threshold is not None else schedule[block_step]
            with gc_paused():  # a collection's cost is the whole process's, not the step's (core/device.py)
                result = _step(model, passes, ctx, policy, n_transfer, config)
            for pos, token in zip(result.unmasked, result.unmasked_tokens):
                sequence[pos] = token
            decode_order.extend(result.unmasked)
            done = config.stop_at_eos and _finish_at_eos(sequence, passes.tokens, p, mask_id, eos)
            response = sequence[p:]
            totals += Totals(1, int(result.full), sum(result.layer_rows), length * cfg.n_layers,
                             result.compute_s, result.decision_s, capture_s=result.capture_s)
            totals.tokens = _n_generated(response, mask_id, eos)
            yield StepEvent(
                step=step,
                block=block,
                prompt_len=p,
                tokens=response,
                totals=replace(totals),
                done=done or (block == n_blocks - 1 and mask_id not in response),
                block_done=mask_id not in response[start - p : end - p],
                **result._asdict(),
                **measured,
            )
            step += 1
            block_step += 1
            if done:
                return


@torch.no_grad()
def _step(
    model: DiffusionTransformer,
    passes: Passes,
    ctx: StepContext,
    policy: CachePolicy,
    n_transfer: int | None,
    config: DecodeConfig,
) -> _Step:
    device = passes.device
    t0 = clock(device)  # core/device.py: CPU time of this thread on a CPU, synchronised wall time on a GPU
    plan = policy.plan(ctx)
    t_plan = clock(device) - t0
    captured = passes.capture_s

    shift = model.config.logit_shift
    # Dream reads position i's logits at row i-1. The prompt is never empty, so these rows are
    # distinct, sorted and one per masked position, in the order of block_masked.
    needed = [pos - shift for pos in ctx.block_masked]
    hook = plan.hook
    stream = hook is not None and hook.stream
    rows = None if plan.rows is None or stream else _rows_to_compute(plan, needed, ctx.length)
    forward = Span(device)
    logits = passes.run(model, rows, needed, hook)
    forward.stop()
    n_layers = model.config.n_layers
    layer_rows = [ctx.length if rows is None else len(rows)] * n_layers if hook is None else hook.layer_rows
    if stream:  # the rows computed at any layer; None when every layer computed every row
        rows = None if min(layer_rows) == ctx.length else hook.computed.nonzero().flatten().tolist()
    noise = None
    if config.temperature:  # the rows of the block's masked positions (core/sampling.py says why)
        block = block_noise(config.seed, ctx.block, ctx.block_step, ctx.block_end - ctx.block_start,
                            logits.shape[-1], device)
        noise = block[index_tensor([pos - ctx.block_start for pos in ctx.block_masked], device)]
    # Probabilities over the whole vocabulary, as every reference has them; the mask token is only
    # never an answer: a model that ranks it first (an untrained one can) would otherwise "unmask" a
    # position into a mask, and the block would never finish.
    picked, tokens, confidences, probs = choose(logits, n_transfer, config.threshold, config.temperature, noise,
                                                mask_id=model.config.mask_token_id, top_p=config.top_p,
                                                top_k=config.top_k, alg=config.alg)
    masked = index_tensor(ctx.block_masked, device)
    passes.tokens.index_copy_(0, masked, torch.where(picked, tokens, passes.tokens[masked]))
    read = [picked.double(), tokens.double(), confidences.double()]
    issue_s = 0.0
    if passes.entropies_in_readout:  # every masked row's entropy, issued now: one wait instead of two
        t_issue = host_clock(device)
        read.append(entropy(probs).double())
        issue_s = host_clock(device) - t_issue  # the decision's signal, though it rides with the choice
    # The step's wait for the device before the decision: what was picked, as what, how surely.
    picked, tokens, confidences, *every_entropy = torch.stack(read).tolist()
    slots = [i for i, flag in enumerate(picked) if flag]
    unmasked = tuple(ctx.block_masked[i] for i in slots)

    t1 = clock(device)  # the device is done: the forward's time is the model's, not the decision's
    if every_entropy:
        entropies = tuple(every_entropy[0][i] for i in slots)
    else:
        entropies = tuple(entropy(probs[index_tensor(slots, device)]).tolist())
    policy.observe(ctx, Outcome(unmasked, entropies))  # tuples: a policy cannot edit what the event reports
    t_end = clock(device)
    signal_s = 0.0 if hook is None else hook.signal_s  # measured inside the forward
    decision_s = t_plan + issue_s + (t_end - t1) + signal_s
    capture_s = passes.capture_s - captured  # paid once per length and shape, on first use: not the step's
    compute_s = t_end - t0 - capture_s
    # The step in three parts that add up to compute_s: the model's pass (without the capture and the
    # layer hook's signals, which are the decision's), the decision, and the rest, which is the token
    # choice: sampling, writing and reading back the tokens, and the step's bookkeeping.
    forward_s = min(max(0.0, forward.seconds - capture_s - signal_s), compute_s - decision_s)
    reason = plan.reason if hook is None or not hook.note else f"{plan.reason}; {hook.note}"
    return _Step(reason=reason, full=rows is None, rows=list(range(ctx.length)) if rows is None else rows,
                 layer_rows=layer_rows, unmasked=list(unmasked), unmasked_tokens=[int(tokens[i]) for i in slots],
                 entropies=list(entropies), max_entropy=max(entropies, default=0.0),
                 confidences=[confidences[i] for i in slots], compute_s=compute_s, forward_s=forward_s,
                 choice_s=compute_s - forward_s - decision_s, decision_s=decision_s, capture_s=capture_s)


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


def _finish_at_eos(sequence: list[int], tokens: torch.Tensor, p: int, mask_id: int, eos: set[int]) -> bool:
    """True once an end-of-text token is decoded with nothing masked before it; fills the rest with it
    (in `sequence`, the host's copy, and in `tokens`, the device's)."""
    if not eos:
        return False
    for i in range(p, len(sequence)):
        if sequence[i] == mask_id:
            return False
        if sequence[i] in eos:
            sequence[i + 1 :] = [sequence[i] if t == mask_id else t for t in sequence[i + 1 :]]
            tail = tokens[i + 1 :]
            tail.masked_fill_(tail == mask_id, sequence[i])
            return True
    return False


def _n_generated(response: list[int], mask_id: int, eos: set[int]) -> int:
    for i, t in enumerate(response):
        if t in eos:
            return i
    return sum(t != mask_id for t in response)


def generate(
    model: DiffusionTransformer,
    prompt_ids: Sequence[int] | torch.Tensor,
    policy: CachePolicy,
    config: DecodeConfig | None = None,
) -> StepEvent:
    """Run `decode` to the end and return its last event (without a config: the model's lengths)."""
    return deque(decode(model, prompt_ids, policy, config), maxlen=1)[0]
