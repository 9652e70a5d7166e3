"""Reference attention over the static cache through ``torch.nn.functional.scaled_dot_product_attention``.

Runs anywhere (CPU tests, GPUs without FlashInfer) and is the twin every other backend is tested against.
On a CUDA device it attends over the whole preallocated cache with a boolean mask, as gpt-fast does, so
shapes never change and a forward can be captured in a CUDA graph; the cost is reading the unused tail of the
cache. On the CPU, where nothing is captured, it reads only the slots a forward can see, without a mask for
a forward of one block (a width-96 model's attention 59 -> 40 ms a plan: docs/BENCHMARKS.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache


class SdpaAttention:
    """SDPA over the static cache.

    Args:
        cache: the cache to read.
        block_size: B; query i of a forward of n queries from slot s sees keys below
            ``min(s + (i // B + 1) * B, s + n)`` (a prompt's last chunk may be short).
    """

    def __init__(self, cache: StaticKVCache, block_size: int) -> None:
        self.cache = cache
        self.block_size = block_size
        self.mask: torch.Tensor | None = None
        self.keys = torch.arange(cache.max_len, device=cache.device)  # (max_len,)
        self.static = cache.device.type != "cpu"  # shapes fixed for CUDA graphs
        self.visible = cache.max_len  # slots the current forward reads

    shares_prompt = False  # every row attends over its own copy of the prompt

    def plan(self, start: int, length: int, shared: int) -> None:
        """Host-side planning before a forward: nothing to do for SDPA (the mask is built on the device)."""

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Build the (1, 1, n, max_len) mask of a forward of ``length`` queries from slot ``start``; on the
        CPU the (1, 1, n, start + n) one, or none for a single block (every query sees every visible slot)."""
        if not self.static:
            self.visible = int(start) + length
            if length <= self.block_size:
                self.mask = None
                return
        group = torch.arange(length, device=self.keys.device) // self.block_size
        # (n,) first invisible slot of each query
        limit = torch.minimum(start + (group + 1) * self.block_size, start + length)
        self.mask = (self.keys[None, : self.visible] < limit[:, None])[None, None]

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(K, n, Hq, D) queries over layer ``layer``'s cache -> (K, n, Hq * D)."""
        rows, length = q.shape[:2]
        keys = self.cache.keys[layer][:, : self.visible].transpose(1, 2)  # (K, Hkv, visible, D)
        values = self.cache.values[layer][:, : self.visible].transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=self.mask, enable_gqa=True
        )
        return out.transpose(1, 2).reshape(rows, length, -1)
