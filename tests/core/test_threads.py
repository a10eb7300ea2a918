"""The decode's thread team (core/threads.py): sized by the cores other processes keep busy."""

import os

import pytest
import torch

from core.config import DecodeConfig
from core.decoder import generate
from core.loading import chat_prompt_ids, load_model
from core.policies import make_policy
from core.threads import INTERVAL_S, TICKS, CoreLoad, ThreadTeam, read_cpu_ticks
from evaluation.tasks import held_out


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Ticks:
    """CPU tick counters that advance as a test says: (every CPU's busy ticks, this process's)."""

    def __init__(self) -> None:
        self.busy, self.own = 0, 0

    def __call__(self):
        return self.busy, self.own

    def advance(self, seconds: float, others: float, own: float) -> None:
        self.busy += round((others + own) * seconds * TICKS)
        self.own += round(own * seconds * TICKS)


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_others_load_is_every_cpus_busy_time_less_this_processs():
    clock, ticks = Clock(), Ticks()
    load = CoreLoad(ticks, clock)
    clock.t += 2
    ticks.advance(2, others=1.0, own=1.5)
    assert load.others() == pytest.approx(1.0)
    clock.t += 1
    ticks.advance(1, others=0.0, own=2.0)
    assert load.others() == pytest.approx(0.0)
    assert CoreLoad(lambda: None, clock).others() is None  # no /proc: not measured


def test_the_team_gives_up_a_core_another_process_keeps_busy_and_takes_it_back(threads):
    clock, ticks = Clock(), Ticks()
    team = ThreadTeam(CoreLoad(ticks, clock), clock, adaptive=True)
    assert team.fit() == 2 and torch.get_num_threads() == 2
    clock.t += INTERVAL_S
    ticks.advance(INTERVAL_S, others=0.9, own=1.1)  # a spinning process, sharing a core with us
    assert team.fit() == 1 and torch.get_num_threads() == 1
    clock.t += INTERVAL_S / 2
    ticks.advance(INTERVAL_S / 2, others=0.0, own=1.0)
    assert team.fit() == 1  # not measured again before INTERVAL_S
    clock.t += INTERVAL_S
    ticks.advance(INTERVAL_S, others=0.1, own=1.0)  # a little background work: the core is free
    assert team.fit() == 2 and torch.get_num_threads() == 2


def test_the_team_takes_the_size_someone_set_as_its_most_and_a_fixed_team_never_moves(threads):
    clock, ticks = Clock(), Ticks()
    team = ThreadTeam(CoreLoad(ticks, clock), clock, adaptive=True)
    team.fit()
    torch.set_num_threads(1)  # app.py --threads 1, a script's own team
    assert team.fit() == 1 and team.most == 1
    clock.t += INTERVAL_S
    ticks.advance(INTERVAL_S, others=2.0, own=1.0)
    assert team.fit() == 1  # never below one thread
    torch.set_num_threads(2)
    fixed = ThreadTeam(CoreLoad(ticks, clock), clock, adaptive=False)
    clock.t += INTERVAL_S
    ticks.advance(INTERVAL_S, others=1.0, own=1.0)
    assert fixed.fit() == 2


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the load is read from Linux's /proc")
def test_this_machine_says_its_tick_counters():
    ticks = read_cpu_ticks()
    assert ticks is not None and ticks[0] >= ticks[1] > 0


def test_one_thread_or_two_decode_the_same_tokens_on_the_embedded_model(threads):
    model, tokenizer = load_model(None)
    ids = chat_prompt_ids(tokenizer, held_out("words", 1, 2)[0].prompt)
    config = DecodeConfig.for_model(model.config, gen_len=64)
    two = [generate(model, ids, make_policy(p), config).tokens for p in ("none", "entropy")]
    torch.set_num_threads(1)
    one = [generate(model, ids, make_policy(p), config).tokens for p in ("none", "entropy")]
    assert one == two
