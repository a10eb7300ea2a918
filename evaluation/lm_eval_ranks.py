"""Data-parallel lm-eval: several processes, each holding the whole model on its own device, under
`accelerate launch` or `torchrun`.

lm-eval's evaluator shards the requests over the ranks and merges the scores on rank 0
(lm_eval/evaluator.py); what it needs from a model is its rank, the number of processes and three
collectives (lm_eval/api/model.py), which accelerate provides as it does for lm-eval's own HF model
(lm_eval/models/huggingface.py). Ranks never talk while they decode, only when lm-eval counts the
requests and gathers the results.

The launch is read from the environment the launcher sets, before any process group starts, so that
a set-up that cannot work is refused before any weights load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import torch
from accelerate import Accelerator, InitProcessGroupKwargs
from accelerate.utils import get_int_from_env

from core.device import usable_cpus

log = logging.getLogger(__name__)

# What torchrun (and accelerate launch, which runs it) sets, then MPI's names, as accelerate reads them.
WORLD_SIZE = ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"]
LOCAL_WORLD_SIZE = ["LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"]
# A rank waits at lm-eval's gathers for the slowest one, which may decode for hours more.
PATIENCE = timedelta(weeks=52)


@dataclass(frozen=True)
class Launch:
    world_size: int  # processes in all
    local_world_size: int  # processes on this machine

    @classmethod
    def from_env(cls) -> Launch:
        world = get_int_from_env(WORLD_SIZE, 1)
        return cls(world, get_int_from_env(LOCAL_WORLD_SIZE, world))


def check_launch(launch: Launch, device: str, device_map: str | None) -> None:
    """A ValueError naming what cannot work with several processes; nothing is started."""
    if launch.world_size == 1:
        return
    n = launch.local_world_size
    if device_map is not None:
        raise ValueError(f"device_map={device_map} spreads one model over every GPU of the machine, and there are "
                         f"{launch.world_size} processes, each spreading its own over the same GPUs: drop device_map "
                         "(each process then holds the whole model on its own GPU) or launch one process")
    kind = device.split(":")[0]
    if kind == "cuda":
        gpus = torch.cuda.device_count()
        if n > gpus:  # accelerate would wrap around and put two ranks on one GPU
            raise ValueError(f"{n} processes on this machine but {gpus} CUDA GPU(s) visible: each process decodes "
                             f"on its own GPU (cuda:LOCAL_RANK), so launch at most {gpus} "
                             f"(accelerate launch --num_processes {gpus})")
    elif kind != "cpu":
        raise ValueError(f"several processes decode on CUDA GPUs or on the CPU, not on {device!r}")


def cpu_threads(launch: Launch) -> int:
    """Each process's share of this machine's cores: processes that share cores slow each other down."""
    cores = usable_cpus()
    if launch.local_world_size > cores:
        log.warning("%d processes share %d CPU cores: each decodes on one thread, taking turns on a core",
                    launch.local_world_size, cores)
    return max(1, cores // launch.local_world_size)


def join(launch: Launch, device: str) -> tuple[Accelerator | None, str]:
    """(the accelerator joining the other processes, or None alone; this process's device): with
    several processes, cuda:LOCAL_RANK over NCCL, or the CPU over gloo with its share of the cores."""
    if launch.world_size == 1:
        return None, device
    on_cpu = device.split(":")[0] == "cpu"
    accelerator = Accelerator(cpu=on_cpu, kwargs_handlers=[InitProcessGroupKwargs(timeout=PATIENCE)])
    if on_cpu:
        torch.set_num_threads(cpu_threads(launch))
        return accelerator, "cpu"
    return accelerator, str(accelerator.device)


def leave(accelerator: Accelerator) -> None:
    """Leave the process group, once every rank has come here.

    The barrier comes first because a gloo worker thread frees the last collective's work after the
    collective returns, and freeing its tensors takes the GIL. A process that starts exiting meanwhile
    aborts at exit ("terminate called without an active exception"): the thread cannot take the GIL
    while the interpreter finalizes. Waiting in the barrier hands that thread the GIL."""
    accelerator.wait_for_everyone()
    accelerator.end_training()
