"""lm-evaluation-harness model `entropycache`: our decoder with any cache policy behind lm-eval's
generate_until, so a task's accuracy comes with the speed that bought it.

    python -m evaluation lm-eval --model entropycache --tasks gsm8k --num_fewshot 4 --apply_chat_template \
        --model_args pretrained=llada,policy=entropy,tau=1,k=2,gen_len=256,block_len=32,device=cuda

Model args: `pretrained` (a checkpoint folder, a hub id, 'llada', 'dream'; default: the embedded
model), `policy` (default entropy) and that policy's own parameters (tau, k, ...), `baseline` (a
second policy decoded on every request too, e.g. none: the speed summary then has its speedup over
it, from one interleaved run), the decode settings (gen_len, block_len, steps, threshold,
temperature, seed; lengths default to the model's), `graphs` (auto, on, off: core/passes.py), device,
dtype and device_map (auto: one model spread over the machine's GPUs, one process only). Every arg is
checked before the weights load. lm-eval's batch_size is accepted and ignored: requests decode one at
a time.

Under `accelerate launch` or `torchrun` every process loads the whole model on its own device
(cuda:LOCAL_RANK; on the CPU, its share of the cores) and lm-eval shards the requests over them
(evaluation/lm_eval_ranks.py); the speed summary is gathered from every rank and merged on rank 0, which
alone prints it and writes the results, each request once with the rank that decoded it.

Generation follows LLaDA's and Fast-dLLM's own evaluation: the whole canvas of gen_len tokens is
decoded, then the text is cut at the first of the request's stop sequences (`until`); the task's
max_gen_toks is not used, gen_len is. Only generation tasks run: the command line refuses a task
that asks for likelihoods before anything loads (evaluation/lm_eval_run.py), and such requests raise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import simple_parse_args_string
from tqdm import tqdm

from core.config import DecodeConfig, check_graphs
from core.decoder import generate
from core.loading import UnknownWordsError, answer_text, load_model, read_config, resolve, text_ids, unknown_words
from core.policies import POLICIES, make_policy
from evaluation.lm_eval_ranks import Launch, check_launch, join
from evaluation.lm_eval_speed import SpeedLog

DECODE_ARGS = {p.name: p for p in DecodeConfig.parameters}  # gen_len, block_len, steps, threshold, ...
GENERATION_ONLY = (
    "the entropycache model runs generation tasks only (generate_until, e.g. gsm8k, minerva_math, humaneval, "
    "bbh_cot_fewshot); {kind} requests need a likelihood a masked diffusion LM does not give exactly"
)
LIKELIHOOD_TYPES = ("loglikelihood", "loglikelihood_rolling", "multiple_choice")


def parse_model_args(args: dict) -> tuple[str, dict, str | None, dict, dict]:
    """(policy, its parameters, baseline, decode settings, loading args) from lm-eval's model args,
    each checked; a ValueError names the first bad one."""
    args = dict(args)
    policy = str(args.pop("policy", "entropy"))
    baseline = args.pop("baseline", None)
    for name in (policy, baseline):
        if name is not None and name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}")
    loading = {k: args.pop(k) for k in ("pretrained", "device", "dtype", "device_map") if k in args}
    for k in ("batch_size", "max_batch_size"):  # lm-eval's own; requests decode one at a time
        args.pop(k, None)
    settings = {k: p.check(args.pop(k)) for k, p in DECODE_ARGS.items() if k in args and args[k] is not None}
    if "graphs" in args:
        settings["graphs"] = check_graphs(args.pop("graphs"))
    own = {p.name for p in POLICIES[policy].parameters}
    unknown = sorted(set(args) - own)
    if unknown:
        allowed = ", ".join([*DECODE_ARGS, "graphs", "pretrained", "policy", "baseline", "device", "dtype",
                             "device_map", *sorted(own)])
        raise ValueError(f"unknown model arg {unknown[0]!r} for policy {policy!r}; allowed: {allowed}")
    make_policy(policy, **args)  # checks the values against the policy's declarations
    if loading.get("dtype") not in (None, "float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {loading['dtype']!r}")
    if loading.get("device_map") not in (None, "auto"):
        raise ValueError(f"device_map must be auto, got {loading['device_map']!r}")
    return policy, args, baseline, settings, loading


@register_model("entropycache")
class EntropyCacheLM(LM):
    last: EntropyCacheLM | None = None  # the latest instance: lm-eval's command line builds it out of our sight

    def __init__(self, **model_args: object) -> None:
        super().__init__()
        self.policy, self.params, self.baseline, settings, loading = parse_model_args(model_args)
        device, device_map = str(loading.get("device") or "cpu"), loading.get("device_map")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {device} was asked for (lm-eval's --device defaults to cuda:0), but this "
                             "machine has no CUDA GPU: pass --device cpu")
        launch = Launch.from_env()
        check_launch(launch, device, device_map)
        folder = resolve(loading.get("pretrained"))  # a hub id is fetched (or refused offline) before loading
        cfg, _, _ = read_config(folder)
        self.config = DecodeConfig.for_model(cfg, **settings)
        self.accelerator, device = join(launch, device)
        if self.accelerator is not None:
            self._rank, self._world_size = self.accelerator.process_index, self.accelerator.num_processes
        dtype = loading.get("dtype")
        self.model, self.tokenizer = load_model(folder, device=device, dtype=getattr(torch, dtype) if dtype else None,
                                                device_map=device_map)
        self._device = self.model.embed.weight.device
        self._chat_ids: dict[str, list[int]] = {}  # rendered chat prompt -> its ids, the contents kept as text
        self.speed = SpeedLog()
        EntropyCacheLM.last = self

    # ---- lm-eval's interface --------------------------------------------------------------------------

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> EntropyCacheLM:
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> EntropyCacheLM:
        """lm-eval's own --device and --batch_size fill in what --model_args leave out (its --device
        is always sent, cuda:0 by default, so a device in the model args must win, not clash)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each request decoded by the policy (then by the baseline, on the same rank). lm-eval gives a
        rank with fewer requests than another copies of its last one, so that every rank answers as
        many; a copy past the request's own `repeats` is such a pad and gets the answer already decoded."""
        out, answered, seen = [], {}, Counter()
        for request in tqdm(requests, desc="entropycache", disable=disable_tqdm or self.rank != 0):
            seen[id(request)] += 1
            if seen[id(request)] > (request.repeats or 1):
                out.append(answered[id(request)])
                continue
            context, gen_kwargs = request.args
            ids = self.prompt_ids(context)
            where = {"task": request.task_name, "doc_id": request.doc_id, "rank": self.rank}
            text = self._decode(ids, self.policy, self.params, where)
            if self.baseline is not None:
                self._decode(ids, self.baseline, {}, where)
            answered[id(request)] = cut_at_stop(text, gen_kwargs.get("until"))
            out.append(answered[id(request)])
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(GENERATION_ONLY.format(kind="loglikelihood"))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(GENERATION_ONLY.format(kind="loglikelihood_rolling"))

    # lm-eval's collectives between ranks, as its own HF model has them (lm_eval/models/huggingface.py)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self.world_size == 1 else self.accelerator.gather(tensor)

    def gather_object(self, obj: object, dst: int = 0) -> list | None:
        if self.world_size == 1:
            return [obj]
        gathered = [None] * self.world_size if self.rank == dst else None
        torch.distributed.gather_object(obj=obj, object_gather_list=gathered, dst=dst)
        return gathered

    def barrier(self) -> None:
        if self.world_size > 1:
            self.accelerator.wait_for_everyone()

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "entropycache")).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.tokenizer.chat_template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The conversation in the model's chat template, as text; its ids are kept so that the
        messages' contents are tokenized as text (a '<|mask|>' in a question stays characters)."""
        unknown = unknown_words(self.tokenizer, " ".join(m["content"] for m in chat_history))
        if unknown:
            raise UnknownWordsError(unknown, len(self.tokenizer))
        rendered, ids = render_chat(self.tokenizer, chat_history, add_generation_prompt)
        self._chat_ids[rendered] = ids
        return rendered

    # ---- ours ---------------------------------------------------------------------------------------------

    def prompt_ids(self, context: str) -> list[int]:
        """A request's context as ids: a chat prompt we rendered, else plain text (special tokens not parsed)."""
        if context in self._chat_ids:
            return self._chat_ids[context]
        unknown = unknown_words(self.tokenizer, context)
        if unknown:
            raise UnknownWordsError(unknown, len(self.tokenizer))
        return text_ids(self.tokenizer, context, split_special_tokens=True)

    def _decode(self, ids: list[int], policy: str, params: dict, where: dict) -> str:
        last = generate(self.model, ids, make_policy(policy, **params), self.config)
        t = last.totals
        self.speed.add(policy, t, {"policy": policy, **where, "prompt_tokens": len(ids), "decode_s": t.compute_s,
                                   "steps": t.steps, "full_steps": t.full_steps, "rows_computed": t.rows_computed,
                                   "rows_full": t.rows_full, "tokens": t.tokens})
        return answer_text(self.tokenizer, last)

    def gathered_speed(self) -> SpeedLog | None:
        """Every rank's speed log merged, on rank 0 (None on the others). A collective: every rank calls it,
        once lm-eval is done."""
        logs = self.gather_object(self.speed, dst=0)
        return SpeedLog.merged(logs) if self.rank == 0 else None

    def speed_summary(self, speed: SpeedLog | None = None) -> dict:
        """The run's speed, per policy decoded (from `speed`, by default this process's): what `python -m
        evaluation lm-eval` adds to the results JSON."""
        speed = self.speed if speed is None else speed
        label = make_policy(self.policy, **self.params).describe()
        out = {"policy": label, "config": asdict(self.config), "processes": self.world_size,
               **speed.summary(self.policy, self.baseline)}
        if self.baseline is not None:
            out["baseline"] = {"policy": make_policy(self.baseline).describe(), **speed.summary(self.baseline, None)}
        out["per_request"] = speed.requests
        return out

    def speed_table(self, speed: SpeedLog | None = None) -> str:
        s = self.speed_summary(speed)
        rows = [(s["policy"], s)] + ([(s["baseline"]["policy"], s["baseline"])] if "baseline" in s else [])
        lines = ["| policy | requests | tokens/s | full steps | rows computed | decision overhead | speedup |",
                 "|---|---|---|---|---|---|---|"]
        for label, r in rows:
            speedup = next((f"{v:.2f}x vs {k[11:]}" for k, v in r.items() if k.startswith("speedup_vs_")), "")
            lines.append(f"| {label} | {r['requests']} | {r['tokens_per_s']:.1f} | {r['full_steps_fraction']:.1%} | "
                         f"{r['rows_fraction']:.1%} | {r['decision_overhead']:.2%} | {speedup} |")
        return "\n".join(lines)


def cut_at_stop(text: str, until: object) -> str:
    """`text` up to the first occurrence of any stop sequence (lm-eval's `until`: a string or a list)."""
    stops = [until] if isinstance(until, str) else list(until or [])
    cut = min((text.find(s) for s in stops if s and s in text), default=len(text))
    return text[:cut]


def render_chat(tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool) -> tuple[str, list[int]]:
    """(the conversation rendered by the chat template, its ids): the template's own pieces are
    tokenized with special tokens parsed, the messages' contents as text."""
    marks = [f"\x00MESSAGE{i}\x00" for i in range(len(messages))]
    framed = [{**m, "content": mark} for m, mark in zip(messages, marks)]
    template = tokenizer.apply_chat_template(framed, add_generation_prompt=add_generation_prompt, tokenize=False)
    ids, rendered, rest = [], "", template
    for message, mark in zip(messages, marks):
        before, rest = rest.split(mark, 1)
        ids += text_ids(tokenizer, before) + text_ids(tokenizer, message["content"], split_special_tokens=True)
        rendered += before + message["content"]
    return rendered + rest, ids + text_ids(tokenizer, rest)
