"""The dream schedule (Dream's diffusion_generate) on a Dream-layout checkpoint: tokens per step as its formula."""

import pytest
import torch
from checkpoints import tiny_qwen2, write_dream

from core.config import DecodeConfig
from core.decoder import decode
from core.loading import chat_prompt_ids, load_model
from core.policies import make_policy

GEN = 64


def dreams_counts(gen_len: int, steps: int) -> list[int]:
    """Dream's _sample, written out: over timesteps linspace(1, 1e-3, steps + 1) in float32, step i unmasks
    int(m * (1 - s / t)) of the m masks left, the last step every one left."""
    timesteps = torch.linspace(1, 1e-3, steps + 1)
    counts, left = [], gen_len
    for i in range(steps):
        ratio = 1 - timesteps[i + 1] / timesteps[i]
        n = left if i == steps - 1 else int(torch.tensor(float(left)) * ratio)
        counts.append(n)
        left -= n
    return counts


@pytest.fixture(scope="module")
def dream(tmp_path_factory):
    model, tokenizer = load_model(write_dream(tmp_path_factory.mktemp("dream") / "Dream-v0-Instruct-7B", tiny_qwen2(7)))
    return model, chat_prompt_ids(tokenizer, "how many apples are there")


@pytest.mark.parametrize("steps", [8, 32])
@pytest.mark.parametrize(("policy", "alg"), [("none", "maskgit_plus"), ("none", "topk_margin"), ("none", "entropy"),
                                             ("entropy", "maskgit_plus"), ("dual", "maskgit_plus")])
def test_the_dream_schedule_unmasks_the_formulas_tokens_at_every_step(dream, steps, policy, alg):
    model, prompt = dream
    config = DecodeConfig(gen_len=GEN, block_len=32, steps=steps, schedule="dream", alg=alg, stop_at_eos=False)
    events = list(decode(model, prompt, make_policy(policy), config))
    assert [len(e.unmasked) for e in events] == dreams_counts(GEN, steps) == config.transfers()
    assert model.config.mask_token_id not in events[-1].tokens and events[-1].done
    assert {e.block for e in events} == {0}  # the whole response is one block, whatever block_len says
    assert events[0].full and all(e.block_done == (e is events[-1]) for e in events)


def test_steps_8_and_32_are_the_counts_dreams_code_gives():
    assert dreams_counts(GEN, 8) == [7, 8, 8, 8, 8, 8, 8, 9]
    assert dreams_counts(GEN, 32) == [1] + [2] * 30 + [3]


def test_without_steps_the_dream_schedule_runs_gen_len_steps_and_the_block_schedule_stays_the_default():
    config = DecodeConfig(gen_len=16, block_len=4, schedule="dream")
    assert config.max_steps == 16 and len(config.transfers()) == 16 and config.transfers()[0] == 0
    assert config.parallel  # a step at 0 leaves another two tokens
    assert DecodeConfig().schedule == "block" and DecodeConfig(gen_len=16, block_len=4).n_blocks == 4
    assert config.one_token_per_step().schedule == "block"  # vanilla decoding is the paper's
