"""Keep camera-frame-sized buffers in the C heap instead of fresh memory maps (glibc).

glibc serves an allocation above its mmap threshold with a fresh ``mmap`` and gives it back on ``free``, so
every 6.2 MB 1080p frame that Fast DDS and rclpy copy on its way into Python lands on pages the kernel
must fault in and zero. rclpy's take holds the GIL meanwhile (``Subscription.take_message``): on the H200
host the executor spent ~15 ms of CPU a frame taking it, and a worker thread that needs the GIL between
device waits ran 32 % slower while 1080p frames came at 20 Hz. With the threshold above a frame and the
heap's top kept (trim threshold) the take costs ~3 ms and the worker slows by 1 %
(``tools/probes/frame_take.py``, docs/BENCHMARKS.md "The planner node on the H200"). Both settings are
needed: with the threshold alone the freed heap top is trimmed back to the kernel after every frame.
It is an opt-in (``input.frame_buffers_in_heap``): the CUDA planner node planned no faster with it at 20 Hz
on the H200 (one machine, 135.7 against 136.0 ms p50) and a CPU one slower (eight alternating runs;
docs/DECISIONS.md), so the component's saving does not reach the plan.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # the largest glibc accepts on 64-bit; ~5 frames of 1080p bgr8
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024  # free heap top kept before returning it to the kernel


def keep_frame_buffers_in_heap() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where the C library has no
    ``mallopt`` (not glibc) or refuses the values."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
