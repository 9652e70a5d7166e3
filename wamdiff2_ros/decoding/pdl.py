"""Programmatic dependent launch (Hopper and later) for the answer forward's Triton kernels.

A 2b answer forward is ~300 kernels in one CUDA graph, and on the H100 its wall time is ~0.24 ms over the
kernels' busy time (docs/BENCHMARKS.md, fortieth session): ~0.8 us between two kernels. Launched with PDL,
a kernel's programs are scheduled while the kernel before it still runs and wait at
``fp8_fused_kernels.wait_for_inputs`` (``griddepcontrol.wait``) until it has finished and its writes are
visible; before that wait a kernel reads only what no kernel of the forward writes (weights, the prompt's
K/V, the attention's bounds) and writes nothing, so the order of results is the stream's. Every
kernel of ``fp8_fused_kernels`` and the split-keys attention takes a ``PDL`` constexpr for it; the
interpreter and CPUs never use it.

Only launches of at most ``PDL_MAX_ROWS`` token rows take it: there most products are the swap-AB kernel
(q/k/v, out and gate/up at 32 rows, gate/up at 64), whose programs, scheduled early, prefetch their weight
rows into L2 while the kernel before them runs (``prefetch_rows``). Measured (docs/BENCHMARKS.md,
forty-second session): the 2b FP8 forward at 32 rows 1.533 ms against 1.673 (H200, interleaved replays),
`bench decode`'s fp8 row 1,999 tokens/s against 1,797 (H100); at 256 rows (K = 8, cuBLAS products) 3 %
slower with it, and K = 4's plan 6 % slower (one pair): there the early programs only wait, holding SM
slots the kernel before them needs. Gated so (forty-fourth session, H100): 2,064 tokens/s against 1,939
without PDL, K = 8 level; K = 4's forward with PDL on its 128 rows 2.197 ms against 2.093 without.
"""

from __future__ import annotations

import functools
import os

import torch

PDL_ON_CUDA = True  # False: no launch takes PDL
PDL_MAX_ROWS = 64  # the swap-AB products' largest tile of rows (fp8_fused.SWAP_AB)


@functools.cache
def _hopper_or_later(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def launch_options(device: torch.device, rows: int) -> dict[str, bool]:
    """The ``PDL`` constexpr, and Triton's ``launch_pdl`` where it is on, for a launch over ``rows`` token
    rows on ``device`` (a concrete count: the launches run eagerly or inside custom ops, never traced)."""
    on = (
        PDL_ON_CUDA
        and rows <= PDL_MAX_ROWS
        and device.type == "cuda"
        and os.environ.get("TRITON_INTERPRET") != "1"
        and _hopper_or_later(device.index if device.index is not None else torch.cuda.current_device())
    )
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}
