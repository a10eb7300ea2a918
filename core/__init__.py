"""EntropyCache decoder library: model, KV cache, cache policies, denoising loop.

import core
model, tok = core.load_model()
for event in core.decode(model, core.chat_prompt_ids(tok, prompt), core.make_policy("entropy")): ...
"""

from core.config import DecodeConfig, ModelConfig
from core.decoder import decode, generate
from core.events import StepEvent, Totals
from core.loading import chat_prompt_ids, load_model
from core.model import DiffusionTransformer
from core.policies import POLICIES, CachePolicy, Outcome, Param, Plan, StepContext, make_policy, register

__all__ = [
    "POLICIES",
    "CachePolicy",
    "DecodeConfig",
    "DiffusionTransformer",
    "ModelConfig",
    "Outcome",
    "Param",
    "Plan",
    "StepContext",
    "StepEvent",
    "Totals",
    "chat_prompt_ids",
    "decode",
    "generate",
    "load_model",
    "make_policy",
    "register",
]
