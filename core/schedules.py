"""How many tokens each step unmasks, by schedule.

block (the paper's, LLaDA's and d2Cache's): the response is cut into blocks decoded left to right, and a
block's tokens are spread as evenly as possible over its steps (core.sampling.transfer_schedule).

dream (Dream's `diffusion_generate`, its generation_utils.py `_sample`): the whole response is one block.
Over timesteps linspace(1, eps, steps + 1), step i unmasks int(m * (1 - s / t)) of the m masks left, with
t, s the step's two timesteps, and the last step every mask left: about gen_len / steps a step, the
truncation pushing what it drops towards the end (at 64 tokens in 64 steps: none at the first step, two at
the last). As there, the arithmetic is float32 (torch.linspace's, then m * (1 - s / t)), so the counts are
the ones its code gives, truncation included.
"""

from __future__ import annotations

import torch

SCHEDULES = ("block", "dream")
DREAM_EPS = 1e-3  # Dream's generation config default, `eps`: the last timestep


def dream_schedule(gen_len: int, steps: int, eps: float = DREAM_EPS) -> list[int]:
    """Tokens unmasked at each of `steps` steps of Dream's schedule over a response of gen_len masks.
    The masks left at a step are the counts before it (nothing else unmasks them), so the schedule is
    known before the decode starts."""
    timesteps = torch.linspace(1, eps, steps + 1, dtype=torch.float32)
    counts, left = [], gen_len
    for i in range(steps):
        if i == steps - 1:
            n = left
        else:  # as Dream: mask_index.sum() / batch is a float32 tensor, times (1 - s / t)
            n = int(torch.tensor(left, dtype=torch.float32) * (1 - timesteps[i + 1] / timesteps[i]))
        counts.append(n)
        left -= n
    return counts
