"""Programmatic dependent launch (Hopper and later) for the answer forward's Triton kernels.

A 2b answer forward is ~300 kernels in one CUDA graph, and on the H100 its wall time is ~0.24 ms over the
kernels' busy time (docs/BENCHMARKS.md, fortieth session): ~0.8 us between two kernels. Launched with PDL,
a kernel's programs are scheduled while the kernel before it still runs and wait at
``fp8_fused_kernels.wait_for_inputs`` (``griddepcontrol.wait``) until it has finished and its writes are
visible; nothing is read or written before that wait, so the order of results is the stream's. Every
kernel of ``fp8_fused_kernels`` and the split-keys attention takes a ``PDL`` constexpr for it. Off until
timed (``PDL_ON_CUDA``); the interpreter and CPUs never use it.
"""

from __future__ import annotations

import functools
import os

import torch

PDL_ON_CUDA = False  # not yet timed on a GPU (docs/BENCHMARKS.md "Next on a GPU")


@functools.cache
def _hopper_or_later(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def launch_options(device: torch.device) -> dict[str, bool]:
    """The ``PDL`` constexpr, and Triton's ``launch_pdl`` where it is on, for a launch on ``device``."""
    on = (
        PDL_ON_CUDA
        and device.type == "cuda"
        and os.environ.get("TRITON_INTERPRET") != "1"
        and _hopper_or_later(device.index if device.index is not None else torch.cuda.current_device())
    )
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}
