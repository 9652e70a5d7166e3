"""Attention backends of the fast decoder: SDPA (CPU, fallback), FlashInfer and the split-keys Triton kernels
(the last two lazily imported), and FlexAttention for prompts only."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from wamdiff2_ros.errors import InputError

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.attention.base import Attention
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

BACKENDS = ("sdpa", "flashinfer", "triton")


def resolve_backend(name: str, device: str) -> str:
    """The concrete decoder backend for a backend setting: ``auto`` is ``flashinfer`` where FlashInfer is
    installed and ``device`` is a CUDA device (``cuda``, ``cuda:1``), else ``sdpa``; any other name is
    returned unchanged (``DecodeConfig`` checks it)."""
    if name != "auto":
        return name
    on_cuda = device == "cuda" or device.startswith("cuda:")
    return "flashinfer" if on_cuda and importlib.util.find_spec("flashinfer") is not None else "sdpa"


def prompt_backend(name: str) -> str:
    """The backend of the prompt's forward: ``triton``'s kernels serve the answer's short forwards only; its
    prompt goes through FlashInfer where installed, else SDPA. ``flex`` (``flex.py``: one block-causal
    FlexAttention call per layer) is chosen explicitly (``decoder.prompt_attention``, ``bench prefill``'s
    rows) until it is measured on a GPU."""
    if name != "triton":
        return name
    return "flashinfer" if importlib.util.find_spec("flashinfer") is not None else "sdpa"


def make_attention(
    name: str, cache: StaticKVCache, block_size: int, use_cuda_graph: bool, query_heads: int
) -> Attention:
    """The attention backend ``name`` over ``cache``.

    Args:
        name: ``sdpa``, ``flashinfer``, ``triton`` (answer forwards only) or ``flex`` (prompts only: see
            ``prompt_backend``).
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
    if name == "triton":
        from wamdiff2_ros.decoding.attention.split_keys import SplitKeysAttention

        return SplitKeysAttention(cache, block_size, query_heads)
    if name == "flex":
        from wamdiff2_ros.decoding.attention.flex import FlexPromptAttention

        return FlexPromptAttention(cache, block_size)
    raise InputError(f"attention backend must be one of {BACKENDS}, got {name!r}")
