"""The attention interface of the fast forward; its backends (sdpa.py, flashinfer.py) sit beside it."""

from __future__ import annotations

from typing import Protocol

import torch


class Attention(Protocol):
    """What the lean forward needs from an attention backend (sdpa.py, flashinfer.py)."""

    shares_prompt: bool  # rows read the prompt from row 0 (so the cache need not copy it to every row)

    def plan(self, start: int, length: int, shared: int) -> None:
        """Host-side setup of a forward of ``length`` queries from slot ``start``, outside any CUDA graph;
        slots below ``shared`` hold the prompt (in row 0 only if ``shares_prompt``)."""

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Device-side setup of one forward of ``length`` queries from slot ``start`` (a device scalar)."""

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(K, n, Hq, D) queries over the cache of ``layer`` -> (K, n, Hq * D)."""

    # Optional: a backend with ``quantizes_output`` True also has ``attend_quantized(layer, q)`` -> (e4m3
    # (K n, Hq D), fp32 row scales (K n, 1)), which the fused FP8 layers take instead (split_keys.py).
