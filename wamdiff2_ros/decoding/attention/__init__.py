"""Attention backends of the fast decoder: SDPA (CPU, fallback) and FlashInfer (lazily imported)."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from wamdiff2_ros.errors import InputError

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.attention.base import Attention
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

BACKENDS = ("sdpa", "flashinfer")


def resolve_backend(name: str, device: str) -> str:
    """The concrete decoder backend for a backend setting: ``auto`` is ``flashinfer`` where FlashInfer is
    installed and ``device`` is a CUDA device (``cuda``, ``cuda:1``), else ``sdpa``; any other name is
    returned unchanged (``DecodeConfig`` checks it)."""
    if name != "auto":
        return name
    on_cuda = device == "cuda" or device.startswith("cuda:")
    return "flashinfer" if on_cuda and importlib.util.find_spec("flashinfer") is not None else "sdpa"


def make_attention(
    name: str, cache: StaticKVCache, block_size: int, use_cuda_graph: bool, query_heads: int
) -> Attention:
    """The attention backend ``name`` over ``cache``.

    Args:
        name: ``sdpa`` or ``flashinfer``.
        cache: the static KV cache the backend reads.
        block_size: B; queries attend in B-sized groups (see ``StaticKVCache`` for the visibility rule).
        use_cuda_graph: the forwards will be captured in CUDA graphs (FlashInfer needs fixed buffers).
        query_heads: Hq of the model.

    Returns:
        The backend.

    Raises:
        InputError: unknown name.
    """
    if name == "sdpa":
        from wamdiff2_ros.decoding.attention.sdpa import SdpaAttention

        return SdpaAttention(cache, block_size)
    if name == "flashinfer":
        from wamdiff2_ros.decoding.attention.flashinfer import FlashInferAttention

        return FlashInferAttention(cache, block_size, use_cuda_graph, query_heads)
    raise InputError(f"attention backend must be one of {BACKENDS}, got {name!r}")
