"""Attention backends of the fast decoder: SDPA (CPU, fallback) and FlashInfer (lazily imported)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wamdiff2_ros.errors import InputError

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.fast_model import Attention
    from wamdiff2_ros.decoding.static_cache import StaticKVCache

BACKENDS = ("sdpa", "flashinfer")


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
