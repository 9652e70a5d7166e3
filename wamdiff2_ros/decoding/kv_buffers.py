"""The fast path's KV buffers: preallocated K and V of every layer, nothing else (a leaf: it imports no other
decoding module; attention backends, the lean forward and ``static_cache`` read and write it)."""

from __future__ import annotations

import torch


class StaticKVCache:
    """K and V buffers of every layer, each (layers, K rows, max_len slots, Hkv, D); see ``allocate``.

    Args:
        keys: the K buffers.
        values: the V buffers, same shape.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        # NHD per row (slot, head, dim): a slot is one page of FlashInfer's paged layout with page size 1.
        self.keys = keys
        self.values = values
        self.rows = keys.shape[1]
        self.max_len = keys.shape[2]
        self.device = keys.device

    @classmethod
    def allocate(
        cls,
        layers: int,
        rows: int,
        max_len: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> StaticKVCache:
        """Zeroed buffers: ``layers`` layers, ``rows`` candidate rows of ``max_len`` slots (prompt, answer and
        room for the fused forward), Hkv = ``kv_heads``, D = ``head_dim``."""
        shape = (layers, rows, max_len, kv_heads, head_dim)
        return cls(
            torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)
        )

    def first_row(self) -> StaticKVCache:
        """A one-row cache over row 0's storage (the prompt is written there once)."""
        return StaticKVCache(self.keys[:, :1], self.values[:, :1])

    def share_prompt(self, prompt_len: int) -> None:
        """Copy row 0's prompt slots [0, P) to every other row (one copy for all layers)."""
        self.keys[:, 1:, :prompt_len] = self.keys[:, :1, :prompt_len]
        self.values[:, 1:, :prompt_len] = self.values[:, :1, :prompt_len]
