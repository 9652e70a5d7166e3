"""The prompt's block-causal attention through PyTorch's FlexAttention, one call per layer.

A prompt of P tokens attends in B-sized groups from slot 0: query i sees the keys of groups up to its own,
``key // B <= i // B``. FlashInfer expresses that as one request per group over page-size-1 pages (66
requests at 1080p; its FA2 kernel took 3.1 ms of the 16.7 ms text prefill on the H200). FlexAttention takes
the rule as a mask function and compiles it into one Triton kernel over the contiguous row-0 K/V, skipping
the tiles above the diagonal. The block mask is built on the host per prompt length (``plan``, outside any
CUDA graph) and kept, so a captured prefill replays with its own. On CUDA one kernel is compiled for any
length; elsewhere FlexAttention's eager twin runs (the CPU tests check it against SDPA). The CUDA prompt's
default for the FlashInfer and split-keys backends from 1,600 tokens (``attention.prompt_backend``): on the
H200 at 1080p the bf16 text prefill took 15.6 ms against FA2's 16.9 (predicted ~1.5 ms of attention
against 3.1); below, SDPA's flash kernel is the faster.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from wamdiff2_ros.errors import InputError

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

_compiled_flex: Any = None


def _kernel(device: torch.device) -> Any:
    # One compiled FlexAttention for the process, for any prompt length (dynamic: a new length would
    # otherwise compile for seconds, and past the recompile limit fall back to the unfused eager path).
    global _compiled_flex
    if device.type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        from wamdiff2_ros.decoding.fast_model import compiled

        _compiled_flex = compiled(flex_attention, dynamic=True)
    return _compiled_flex


@functools.cache
def _visible(block_size: int):
    # One mask function per block size: a new closure per length would be a new guard for Dynamo.
    def visible(batch, head, query, key):
        return key // block_size <= query // block_size

    return visible


def block_causal_mask(block_size: int, length: int, device: torch.device) -> Any:
    """FlexAttention's block mask of ``length`` queries over ``length`` keys in ``block_size`` groups."""
    return create_block_mask(_visible(block_size), None, None, length, length, device=device)


class FlexPromptAttention:
    """Block-causal attention of a prompt over one cache row (slots [0, P)).

    Args:
        cache: a one-row cache (``StaticKVCache.first_row``).
        block_size: B.

    Raises:
        ValueError: the cache has more than one row.
    """

    def __init__(self, cache: StaticKVCache, block_size: int) -> None:
        if cache.rows != 1:
            raise ValueError(f"the prompt's attention reads one cache row, got {cache.rows}")
        self.cache = cache
        self.block_size = block_size
        self.masks: dict[int, Any] = {}  # prompt length -> its block mask, kept for the graphs
        self.length = 0
        self.kernel = _kernel(cache.device)

    shares_prompt = False  # one row: nothing to share

    def plan(self, start: int, length: int, shared: int) -> None:
        """Build (once per length) the block mask of a prompt of ``length`` tokens from slot 0.

        Raises:
            InputError: ``start`` is not 0 (answer forwards use the decoder's own backend).
        """
        if start != 0:
            raise InputError(f"the prompt attention plans prompts from slot 0, got start {start}")
        if length not in self.masks:
            self.masks[length] = block_causal_mask(self.block_size, length, self.cache.device)
        self.length = length

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Nothing on the device: the block mask holds the whole rule."""

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(1, P, Hq, D) queries over the layer's slots [0, P) -> (1, P, Hq * D)."""
        rows, length, heads, head_dim = q.shape
        keys = self.cache.keys[layer][:, :length].transpose(1, 2)  # (1, Hkv, P, D)
        values = self.cache.values[layer][:, :length].transpose(1, 2)
        out = self.kernel(q.transpose(1, 2), keys, values, block_mask=self.masks[length], enable_gqa=True)
        return out.transpose(1, 2).reshape(rows, length, heads * head_dim)
