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


def resolve_backend(name: str, device: str, dtype: str = "bf16") -> str:
    """The concrete decoder backend for a backend setting; any name but ``auto`` is returned unchanged
    (``DecodeConfig`` checks it).

    ``auto`` with 16-bit weights (``dtype`` ``bf16`` or ``fp16``) on a CUDA device (``cuda``, ``cuda:1``) is
    ``triton`` (the split-keys kernels; Triton comes with torch's CUDA wheels) where Triton is importable,
    else ``flashinfer`` where installed, else ``sdpa``; in fp32 (those kernels are 16-bit: Triton's dots
    round fp32 to TF32, FlashInfer has none) and on any other device ``sdpa``, the exact twin. On the H200
    at 1080p the node's own call took 107.4 against 110.0 ms at K = 1 and 123.0 against 131-140 ms at K = 4
    with triton (docs/DECISIONS.md).
    """
    if name != "auto":
        return name
    if (device != "cuda" and not device.startswith("cuda:")) or dtype == "fp32":
        return "sdpa"
    for backend in ("triton", "flashinfer"):
        if importlib.util.find_spec(backend) is not None:
            return backend
    return "sdpa"


# Shortest prompt whose CUDA text prefill goes through FlexAttention rather than SDPA's flash kernel. On the
# H200 (2b, bf16, compiled and graphed): SDPA 7.00 / flex 7.43 ms at 1,006 tokens, 11.41 / 11.55 at 1,526,
# 16.4 / 15.5 at 2,106; the difference crosses zero near 1,600 (docs/BENCHMARKS.md, 2026-12-03).
FLEX_MIN_PROMPT_TOKENS = 1600


def prompt_backend(name: str, device_type: str, prompt_len: int | None = None) -> str:
    """The backend of the prompt's forward for answer backend ``name`` on a ``device_type`` device.

    On CUDA the fast backends' prompt goes through ``flex`` (``flex.py``: one block-causal FlexAttention call
    per layer, compiled, so where Triton is importable; measured on the H200 at 1080p, 1.1-1.5 ms under
    FlashInfer's FA2 over 66 groups) from ``FLEX_MIN_PROMPT_TOKENS`` on (``prompt_len`` None counts as
    long), and through ``sdpa`` below, where SDPA's flash kernel is the faster. ``sdpa`` keeps its own
    prompt everywhere: it is the plain twin of the kernels. Elsewhere ``triton``'s prompt (its kernels
    serve the answer's short forwards only) goes through FlashInfer where installed, else SDPA.
    """
    if name in ("flashinfer", "triton") and device_type == "cuda" and importlib.util.find_spec("triton"):
        return "flex" if prompt_len is None or prompt_len >= FLEX_MIN_PROMPT_TOKENS else "sdpa"
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
