"""A worker function for the pool tests (importable by spawned processes, unlike a test module)."""

from __future__ import annotations

import threading


def square_or_hang(job: tuple[int, bool]) -> int:
    """``index`` squared, or a worker that never answers (the parent gives up on it and ends the pool)."""
    index, hang = job
    if hang:
        threading.Event().wait()  # never set: the worker blocks until the pool is terminated
    return index * index
