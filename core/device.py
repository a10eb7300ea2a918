"""Timing work on a device: on a GPU kernels run asynchronously, so a clock read must wait for them."""

from __future__ import annotations

import time

import torch


def sync(device: torch.device) -> None:
    """Wait for the device (a no-op on CPU): timings must include the work they time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished everything queued so far."""
    sync(device)
    return time.perf_counter()
