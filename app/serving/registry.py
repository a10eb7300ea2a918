"""The models a visitor may pick: a fixed server-side list, each loaded once and cached.

The embedded model is always there (on the CPU). LLaDA-8B-Instruct and Dream-7B-Instruct are offered
when a GPU is present. Further local checkpoint folders come only from the operator: the `--model`
flag of app.py or the ENTROPYCACHE_MODELS variable (folders separated by os.pathsep). A visitor picks
a label from a dropdown; no path a visitor sends is ever opened.

Each choice carries what the app shows before loading anything: its decode defaults (read from the
checkpoint's config, core.loading.read_config), example prompts and what it was trained on
(app/serving/examples.py), which a prompt with words the model does not know is told.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from app.serving.device_thread import CPU_THREAD
from app.serving.examples import EXAMPLES_INSTEAD, Example, chat_examples, task_examples
from app.serving.sent import check_choice
from core.compiled import DEFAULT_COMPILE, check_compile
from core.config import DEFAULT_BLOCK_LEN, DEFAULT_GEN_LEN, DecodeConfig, check_graphs
from core.fusion import check_fusion
from core.loading import EMBEDDED, chat_prompt_ids, load_model, load_tokenizer, read_config

ENV_MODELS = "ENTROPYCACHE_MODELS"
EMBEDDED_LABEL = "sums-and-stories (embedded, CPU)"
CHAT_FRAME_TOKENS = 64  # the most tokens a chat template adds around a prompt
HUB_MODELS = {"LLaDA-8B-Instruct (GPU)": "llada", "Dream-7B-Instruct (GPU)": "dream"}  # label -> core alias


@dataclass(frozen=True)
class ModelChoice:
    label: str
    source: str  # what core.loading.load_model receives: 'embedded', an alias or a local folder
    device: str  # 'cpu' or 'cuda'
    gen_len: int
    block_len: int
    # Each with its title and the decode settings picking it sets (app/serving/examples.py).
    example_list: tuple[Example, ...]
    trained_on: str = ""  # "This model was trained only on ...": said of a prompt with words it does not know

    @property
    def examples(self) -> tuple[str, ...]:
        """The example prompts' texts, in the examples list's order."""
        return tuple(e.text for e in self.example_list)

    @property
    def paper_example(self) -> int:
        """The example the paper's comparison races: the first long one (else the first)."""
        return next((i for i, e in enumerate(self.example_list) if e.long), 0)


class ModelRegistry:
    """Labels -> models, loaded on first use and cached; at most `max_gpu_models` GPU models resident."""

    def __init__(self, choices: Sequence[ModelChoice], max_gpu_models: int = 1, graphs: str = "auto",
                 fusion: str = "auto", compile_mode: str = DEFAULT_COMPILE) -> None:
        self._choices = {c.label: c for c in choices}
        self.max_gpu_models = max_gpu_models
        self.graphs = check_graphs(graphs)  # how every decode here runs its passes (core/passes.py)
        self.fusion = check_fusion(fusion)  # whether each model's pointwise parts are compiled (core/fusion.py)
        self.compile_mode = check_compile(compile_mode)  # whether its CPU passes are (core/compiled.py)
        self._loaded: dict[str, tuple[object, object]] = {}
        self._tokenizers: dict[str, object] = {}  # of local models not loaded yet
        # One lock per model: two visitors never load the same 8B model twice, and nobody using the
        # embedded model waits while a big one loads. GPU loads also share one lock (one resident at a time).
        self._locks = {c.label: threading.Lock() for c in choices}
        self._gpu_lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()  # not a model's lock: checking a prompt never waits for a load

    @property
    def labels(self) -> list[str]:
        return list(self._choices)

    def choice(self, label: object) -> ModelChoice:
        """The choice of a label a client sent; a ValueError naming the choices for anything else. A run
        looks its model up here once, and hands the choice on (load, check_prompt)."""
        return self._choices[check_choice(label, self.labels, "model")]

    def is_loaded(self, label: str) -> bool:
        return label in self._loaded

    def get(self, label: object) -> tuple[object, object]:
        """(model, tokenizer) for a label a caller names (a script, a test): its choice, loaded."""
        return self.load(self.choice(label))

    def load(self, choice: ModelChoice) -> tuple[object, object]:
        """(model, tokenizer) of a choice looked up already (choice), loading it the first time it is asked for."""
        label = choice.label
        with self._locks[label]:
            if label not in self._loaded:
                load = partial(load_model, fusion=self.fusion, compile_mode=self.compile_mode)
                if choice.device == "cuda":
                    with self._gpu_lock:
                        self._evict_gpu_models()
                        self._loaded[label] = load(choice.source, device=choice.device)
                else:  # on the thread every CPU decode runs on (app/serving/device_thread.py)
                    self._loaded[label] = CPU_THREAD.call(load, choice.source, choice.device)
            return self._loaded[label]

    def check_prompt(self, choice: ModelChoice, prompt: str, instead: str = EXAMPLES_INSTEAD) -> list[int] | None:
        """Before any decoding: a ValueError when the model cannot read the prompt, with core's words
        for which words it does not know (core.loading.chat_prompt_ids), what it was trained on and
        `instead`: what the asking tab offers in its place (the Sweep has held-out sets, not examples);
        else the ids the model decodes, or None for a model whose tokenizer is not at hand (a hub model
        not loaded yet, whose byte-level tokenizer reads any text: most_tokens bounds its length)."""
        tokenizer = self._tokenizer(choice)
        if tokenizer is None:
            return None
        try:
            return chat_prompt_ids(tokenizer, prompt)
        except ValueError as e:
            reason = str(e)
            said = f" {choice.trained_on}: {instead}" if choice.trained_on else ""
            raise ValueError(f"{reason[:1].upper()}{reason[1:]}.{said}") from None

    def _tokenizer(self, choice: ModelChoice):
        """The model's tokenizer, without its weights for a local model not loaded yet; None for a hub
        model not loaded yet, whose byte-level tokenizer reads any text anyway."""
        label = choice.label
        if label in self._loaded:
            return self._loaded[label][1]
        folder = Path(choice.source)
        if not folder.is_dir():
            return None
        with self._tokenizer_lock:
            if label not in self._tokenizers:
                self._tokenizers[label] = load_tokenizer(folder, read_config(folder)[1])
            return self._tokenizers[label]

    def preload(self, labels: Sequence[str] | None = None) -> None:
        for label in labels if labels is not None else self.labels:
            self.get(label)

    def _evict_gpu_models(self) -> None:
        # Two 8B models do not fit next to each other on every GPU: the oldest loaded makes room for the
        # one asked for now. A race still using an evicted model keeps it alive until that race ends.
        on_gpu = [k for k in self._loaded if self._choices[k].device == "cuda"]  # oldest first
        for label in on_gpu[: max(0, len(on_gpu) - self.max_gpu_models + 1)]:
            del self._loaded[label]
        torch.cuda.empty_cache()


def prompt_tokens(ids: list[int] | None, prompt: str) -> int:
    """The prompt's length in tokens: its ids' (ModelRegistry.check_prompt), or most_tokens where the
    model's tokenizer was not at hand."""
    return len(ids) if ids is not None else most_tokens(prompt)


def most_tokens(prompt: str) -> int:
    """The most tokens a byte-level tokenizer's chat template makes of `prompt`: a token per UTF-8 byte
    at most, and the template's CHAT_FRAME_TOKENS."""
    return len(prompt.encode("utf-8")) + CHAT_FRAME_TOKENS


def local_choice(folder: str | os.PathLike, label: str, device: str) -> ModelChoice:
    path = Path(folder).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise ValueError(f"model folder {str(folder)!r} has no config.json")
    config, family, _ = read_config(path)
    defaults = DecodeConfig.for_model(config)
    if family.name == "own":  # one of ours: its tasks (evaluation/tasks/) give the examples
        examples, trained_on = task_examples(load_tokenizer(path, family), config.task_settings)
        return ModelChoice(label, str(path), device, defaults.gen_len, defaults.block_len, examples, trained_on)
    return ModelChoice(label, str(path), device, defaults.gen_len, defaults.block_len, chat_examples())


def extra_dirs_from_env() -> list[str]:
    return [d for d in os.environ.get(ENV_MODELS, "").split(os.pathsep) if d.strip()]


def build_registry(
    extra_dirs: Sequence[str] = (),
    embedded: str | os.PathLike | None = None,
    cuda: bool | None = None,
    max_gpu_models: int = 1,
    graphs: str = "auto",
    fusion: str = "auto",
    compile_mode: str = DEFAULT_COMPILE,
) -> ModelRegistry:
    """The fixed list of choices. `embedded` overrides the shipped model's folder (tests, development);
    `graphs`: every decode's DecodeConfig.graphs (app.py --graphs);
    `fusion` and `compile_mode`: every model's (app.py --fusion, --compile)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    device = "cuda" if cuda else "cpu"
    choices = [local_choice(embedded or EMBEDDED, EMBEDDED_LABEL, "cpu")]
    if cuda:
        for label, alias in HUB_MODELS.items():  # not downloaded yet: core's defaults for a checkpoint that says none
            choices.append(ModelChoice(label, alias, "cuda", DEFAULT_GEN_LEN, DEFAULT_BLOCK_LEN, chat_examples()))
    for folder in dict.fromkeys(extra_dirs):  # the same folder twice is one choice
        label = _unique(f"{Path(folder).resolve().name} (local, {device.upper()})", [c.label for c in choices])
        choices.append(local_choice(folder, label, device))
    return ModelRegistry(choices, max_gpu_models, graphs, fusion, compile_mode)


def _unique(label: str, taken: list[str]) -> str:
    n, out = 2, label
    while out in taken:
        out, n = f"{label} #{n}", n + 1
    return out
