"""Load a checkpoint folder or hub id into our model: safetensors only, no remote code.

    model, tokenizer = load_model("GSAI-ML/LLaDA-8B-Instruct", device="cuda")
    model, tokenizer = load_model("assets/sums-and-stories")

The model is built on the meta device (accelerate's init_empty_weights) and each parameter is
materialised straight onto its device from the shards, so an 8B model never exists twice in memory.
With device_map="auto", accelerate spreads the layers over the GPUs (and CPU) that have room.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import torch
import transformers
from accelerate import dispatch_model, infer_auto_device_map, init_empty_weights
from accelerate.utils import set_module_tensor_to_device
from safetensors import SafetensorError, safe_open

from core.compiled import DEFAULT_COMPILE, check_compile, set_compile
from core.config import DecodeConfig, ModelConfig
from core.families import Family, family_for
from core.fusion import check_fusion, set_fusion
from core.model import DiffusionTransformer

ALIASES = {
    "llada": "GSAI-ML/LLaDA-8B-Instruct",
    "dream": "Dream-org/Dream-v0-Instruct-7B",
}
EMBEDDED = Path(__file__).resolve().parent.parent / "assets" / "sums-and-stories"
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model"]  # never pickled weights
IGNORED_TENSORS = ("rotary_emb.inv_freq",)


def resolve(name_or_path: str | os.PathLike | None) -> Path:
    """A local folder as is; 'embedded' or None: the shipped model; else a hub id, fetched once."""
    if name_or_path in (None, "", "embedded"):
        return EMBEDDED
    path = Path(name_or_path)
    if path.is_dir():
        return path
    repo = ALIASES.get(str(name_or_path).lower(), str(name_or_path))
    if path.exists() or repo.count("/") != 1 or repo.startswith(("/", ".", "~")):  # a path, never a hub id
        raise ValueError(f"{name_or_path!r} is neither a checkpoint folder nor a hub id like 'org/name'")
    from huggingface_hub import snapshot_download  # honours HF_HUB_OFFLINE and HF_HUB_CACHE
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id=repo, allow_patterns=HUB_FILES))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as e:  # ValueError: not a valid repo id
        local = "" if repo in ALIASES.values() else f"there is no folder {str(name_or_path)!r} here, and "
        raise ValueError(f"{local}could not get {repo!r} from the hub or its cache: {e}") from None


class _Shards:
    """Tensor name -> file, over model.safetensors or a sharded index."""

    def __init__(self, folder: Path) -> None:
        index = folder / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            for f in set(weight_map.values()):
                if Path(f).name != f:  # shards live beside the index, never elsewhere
                    raise ValueError(f"index names a shard outside the checkpoint folder: {f!r}")
            self.files = {name: folder / f for name, f in weight_map.items()}
        elif (folder / "model.safetensors").exists():
            try:
                with safe_open(folder / "model.safetensors", framework="pt") as f:
                    self.files = {name: folder / "model.safetensors" for name in f.keys()}
            except SafetensorError as e:
                raise ValueError(f"{folder / 'model.safetensors'} is not a readable safetensors file: {e}") from None
        else:
            raise ValueError(f"no safetensors weights in {folder} (pickled .bin checkpoints are never loaded)")
        self._open: dict[Path, object] = {}

    def get(self, name: str) -> torch.Tensor:
        file = self.files[name]
        if file not in self._open:
            if not file.exists():
                raise ValueError(f"shard {file.name} named in the index is missing")
            try:
                self._open[file] = safe_open(file, framework="pt")
            except SafetensorError as e:
                raise ValueError(f"{file} is not a readable safetensors file: {e}") from None
        if name not in self._open[file].keys():
            raise ValueError(f"tensor {name!r} is listed in the index but missing from {file.name}")
        return self._open[file].get_tensor(name)


def load_tokenizer(folder: Path, family: Family):
    cls = getattr(transformers, family.tokenizer_class)
    return cls.from_pretrained(folder, trust_remote_code=False)


def read_config(folder: Path) -> tuple[ModelConfig, Family, dict]:
    """A checkpoint folder's ModelConfig (its decode defaults included), its family and the raw
    config.json, without loading weights or tokenizer. End-of-text ids the tokenizer adds are not in it."""
    config_file = Path(folder) / "config.json"
    if not config_file.exists():
        raise ValueError(f"{folder} has no config.json")
    try:
        raw = json.loads(config_file.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
        family = family_for(raw)
        config = family.config(raw, [])
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"{config_file}: {e}") from None
    return _checked(config, folder), family, raw


def _checked(config: ModelConfig, folder: Path) -> ModelConfig:
    """`config` once the decode settings it declares for its tasks are ones a decode takes."""
    for task in config.task_settings:
        try:
            DecodeConfig.for_model(config, task=task)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{folder}/config.json: task_settings: {e}") from None
    return config


def load_model(
    name_or_path: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    device_map: str | dict | None = None,
    fusion: str = "auto",
    compile_mode: str = DEFAULT_COMPILE,
) -> tuple[DiffusionTransformer, object]:
    """Load (model, tokenizer). dtype defaults to bfloat16 on GPU and float32 on CPU; `fusion` says
    whether its pointwise parts run compiled (core/fusion.py; auto: on a single CUDA GPU), `compile_mode`
    whether its passes do (core/compiled.py; auto: on a CPU with a C++ compiler).

    Everything known about the model (its shape, special ids, decode defaults) is `model.config`."""
    check_fusion(fusion)
    check_compile(compile_mode)
    folder = resolve(name_or_path)
    _, family, raw = read_config(folder)
    tokenizer = load_tokenizer(folder, family)
    end_ids = [i for i in (tokenizer.convert_tokens_to_ids(t) for t in family.end_tokens) if i is not None]
    end_ids = [i for i in end_ids if i != tokenizer.unk_token_id]
    cfg = family.config(raw, end_ids)  # read_config checked its task settings (end_ids change none)
    device = _check_device(device)

    with init_empty_weights():
        model = DiffusionTransformer(cfg)
    placement = _placement(model, device, dtype or torch.bfloat16, device_map)
    on_gpu = any(isinstance(d, int) or str(d).startswith("cuda") for d in placement.values())
    dtype = dtype or (torch.bfloat16 if on_gpu else torch.float32)
    _fill(model, _Shards(folder), family.sources(cfg), placement, dtype)
    if len({f"cuda:{d}" if isinstance(d, int) else str(d) for d in placement.values()}) > 1:
        model = dispatch_model(model, placement)
    set_fusion(model, fusion)
    set_compile(model, compile_mode)
    return model.eval(), tokenizer


def _check_device(device: str | torch.device) -> torch.device:
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {str(device)!r}; use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):  # torch knows mps, xla, meta...: the decoder runs on none of them
        raise ValueError(f"device {str(device)!r} is not one the decoder runs on; use cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but this machine has no CUDA GPU")
    return device


def _placement(model, device: torch.device, dtype, device_map) -> dict[str, torch.device | str | int]:
    if device_map is None:
        return {"": device}
    if device_map == "auto":
        return infer_auto_device_map(model, no_split_module_classes=["Block"], dtype=dtype)
    if isinstance(device_map, dict):
        return device_map
    raise ValueError(f"device_map must be None, 'auto' or a dict, got {device_map!r}")


def _device_of(name: str, placement: dict) -> torch.device | str | int:
    best = max((k for k in placement if k == "" or name == k or name.startswith(k + ".")), key=len, default=None)
    if best is None:
        raise ValueError(f"device_map places no module holding {name}")
    return placement[best]


def _fill(model, shards: _Shards, sources: dict[str, list[str]], placement: dict, dtype) -> None:
    expected = dict(model.named_parameters())
    used = set()
    for name, parts in sources.items():
        for part in parts:
            if part not in shards.files:
                raise ValueError(f"checkpoint lacks tensor {part!r} (needed for {name})")
        tensors = [shards.get(p) for p in parts]
        for part, t, want in zip(parts, tensors, part_shapes(name, len(parts), expected[name].shape, model.config)):
            if tuple(t.shape) != want:
                raise ValueError(f"tensor {part!r} has shape {tuple(t.shape)}, but config.json implies {want}")
        value = torch.cat(tensors) if len(tensors) > 1 else tensors[0]
        set_module_tensor_to_device(model, name, _device_of(name, placement), value=value, dtype=dtype)
        used.update(parts)
    extra = sorted(n for n in shards.files if n not in used and not n.endswith(IGNORED_TENSORS))
    if extra:
        raise ValueError(f"checkpoint has tensor {extra[0]!r} that the config does not explain ({len(extra)} such)")
    if model.config.tie_embeddings:
        model.lm_head.weight = model.embed.weight


def part_shapes(name: str, n_parts: int, shape: torch.Size, cfg) -> list[tuple[int, ...]]:
    """Shapes of the checkpoint tensors concatenated (along dim 0) into our parameter `name`."""
    rest = tuple(shape[1:])
    if n_parts == 1:
        return [tuple(shape)]
    if ".wqkv." in name:
        q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        return [(q, *rest), (kv, *rest), (kv, *rest)]
    if ".w13." in name:
        return [(cfg.ffn_dim, *rest)] * 2
    raise ValueError(f"no rule to split {name} into {n_parts} tensors")


def answer_text(tokenizer, event) -> str:
    """The generated answer of a decode event: tokens before the first end-of-text, specials dropped."""
    return tokenizer.decode(event.tokens[: event.totals.tokens], skip_special_tokens=True)


def check_unicode(text: str, what: str) -> str:
    """`text` when every character can be written as UTF-8, else a ValueError naming the first that
    cannot (a lone surrogate, as JSON or undecodable command-line bytes can carry): a tokenizer, a file
    or an answer's JSON would fail on it later."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} has a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start + 1}, "
                         "which is not a character: send valid Unicode text.") from None
    return text


def chat_prompt_ids(tokenizer, text: str) -> list[int]:
    """The prompt as the model was tuned to see it: the user turn in the chat template.

    A visitor's text is text: written special tokens ('<|mask|>', '<|eot_id|>') are tokenized as the
    characters they are, never as the special tokens. Words the model cannot read (its tokenizer
    maps them to the unknown token) are refused with a message naming them."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the prompt is empty")
    unknown = unknown_words(tokenizer, check_unicode(text, "the prompt"))
    if unknown:
        raise UnknownWordsError(unknown, len(tokenizer))
    before, after = chat_frame(tokenizer)
    return [*before, *text_ids(tokenizer, text, split_special_tokens=True), *after]


def chat_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The chat template's token ids before and after a user turn's text (the generation prompt included).

    The template is rendered around a placeholder and tokenized with special-token parsing; the text
    alone is tokenized without it. Every template puts a special token or a line break on either
    side of the content, so the pieces tokenize as the whole string would."""
    template = tokenizer.apply_chat_template(
        [{"role": "user", "content": _PLACEHOLDER}], add_generation_prompt=True, tokenize=False
    )
    before, after = template.split(_PLACEHOLDER)
    return text_ids(tokenizer, before), text_ids(tokenizer, after)


_PLACEHOLDER = "\x00CONTENT\x00"
# A fast tokenizer keeps split_special_tokens as state of its Rust backend (encode_special_tokens), set by
# each call and read while the encode runs without the GIL: two threads tokenizing at once (two visitors'
# prompts checked at the same moment) can encode a chat frame with its special tokens split into words,
# or a visitor's written '<|mask|>' as the special token. So every call that sets it holds this lock.
_TOKENIZE_LOCK = threading.Lock()


def text_ids(tokenizer, text: str, split_special_tokens: bool = False) -> list[int]:
    """`text` as ids, no special tokens added; written special tokens parsed unless split_special_tokens."""
    if not text:
        return []
    with _TOKENIZE_LOCK:
        out = tokenizer(text, add_special_tokens=False, split_special_tokens=split_special_tokens)
    return [int(i) for i in out["input_ids"]]


class UnknownWordsError(ValueError):
    """A prompt with words the model's tokenizer can only map to its unknown token."""

    def __init__(self, words: list[str], vocab_size: int) -> None:
        self.words = words
        shown = ", ".join(repr(w) for w in words[:12]) + (", ..." if len(words) > 12 else "")
        super().__init__(
            f"the model does not know {len(words)} word{'s' * (len(words) != 1)} of the prompt: {shown}. "
            f"It reads only the {vocab_size} tokens of its vocabulary: write the prompt in its words"
        )


def unknown_words(tokenizer, text: str) -> list[str]:
    """The pieces of `text` this tokenizer can only map to its unknown token, each once, in order.
    Empty for byte-level tokenizers (LLaDA's, Dream's), which can spell anything."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return []
    with _TOKENIZE_LOCK:
        enc = tokenizer(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    words = [text[a:b] for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if i == unk]
    return list(dict.fromkeys(words))
