"""The embedded model's tokenizer: one token per word of the task's vocabulary.

Built with `tokenizers` and saved as a standard tokenizer.json + tokenizer_config.json (chat template
included), so `transformers.AutoTokenizer` loads it exactly like LLaDA's or Dream's.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<|pad|>", "<|unk|>", "<|mask|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(set(words)))}
    tok = Tokenizer(WordLevel(vocab, unk_token="<|unk|>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        unk_token="<|unk|>",
        mask_token="<|mask|>",
        eos_token="<|eos|>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
