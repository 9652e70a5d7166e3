"""The pieces of one Qwen3-VL text-decoder layer as plain tensor functions (the model's own weights, or FP8
weights through ``fp8.linear``, unfused).

``LeanDecoder`` (fast_model.py) runs a forward as ``begin``, ``between`` for each pair of layers and
``end``, attention calls in between; a prompt's prefill as ``prompt_input`` and ``prompt_output`` around
each attention. fp8_fused.py has the same pieces on fused FP8 kernels; this module is their twin.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from wamdiff2_ros.decoding.fp8 import Fp8Weight, Fp8WeightOnly, linear


def rope_angles(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (n, 1, D) of 1D RoPE at ``positions`` (n,), in transformers' half-split layout."""
    freqs = positions.float()[:, None] * inv_freq  # (n, D / 2)
    angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (K, n, heads, D); cos/sin: (n, 1, D). Half-split rotation (transformers' rotate_half layout).
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def attention_input(
    x: torch.Tensor,
    input_norm: torch.Tensor,
    qkv_weight: torch.Tensor | Fp8Weight | Fp8WeightOnly,
    qk_norm: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    heads: int,
    eps: float,
) -> torch.Tensor:
    """Queries (K, n, Hq, D) of hidden states ``x`` (K, n, H); their K/V are written to ``keys``/``values``
    (K, slots, Hkv, D) at ``slots`` (n,), in place.

    F.rms_norm rounds once after the weight where transformers rounds before it (equal in fp32). q and k
    heads are normed and rotated together; the weight multiply after the norm keeps the rounding of
    transformers' q_norm/k_norm.
    """
    qkv = linear(F.rms_norm(x, (x.shape[-1],), input_norm, eps), qkv_weight)
    return queries_and_store(qkv, qk_norm, cos, sin, keys, values, slots, heads, eps)


def queries_and_store(
    qkv: torch.Tensor,
    qk_norm: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    heads: int,
    eps: float,
) -> torch.Tensor:
    """``attention_input`` after its product: q and k of ``qkv`` (K, n, (Hq + 2 Hkv) D) normed and rotated,
    k and v written at ``slots`` -> queries (K, n, Hq, D)."""
    rows, length, _ = qkv.shape
    qk_heads, dim = qk_norm.shape
    kv_heads = qk_heads - heads
    qkv = qkv.view(rows, length, qk_heads + kv_heads, dim)
    qk = _rotate(F.rms_norm(qkv[:, :, :qk_heads], (dim,), eps=eps) * qk_norm, cos, sin)
    q, k = qk.split([heads, kv_heads], dim=2)
    keys.index_copy_(1, slots, k)
    values.index_copy_(1, slots, qkv[:, :, qk_heads:])
    return q


def layer_output(
    x: torch.Tensor,
    attended: torch.Tensor,
    out: torch.Tensor | Fp8Weight | Fp8WeightOnly,
    post_norm: torch.Tensor,
    gate_up: torch.Tensor | Fp8Weight | Fp8WeightOnly,
    down: torch.Tensor | Fp8Weight | Fp8WeightOnly,
    eps: float,
) -> torch.Tensor:
    """The rest of a layer after attention: output projection, residual, MLP, residual -> (K, n, H)."""
    x = x + linear(attended, out)
    gate, up = linear(F.rms_norm(x, (x.shape[-1],), post_norm, eps), gate_up).chunk(2, dim=-1)
    return x + linear(F.silu(gate) * up, down)


def begin(
    tokens: torch.Tensor,
    start: torch.Tensor,
    rope_delta: torch.Tensor,
    inv_freq: torch.Tensor,
    embed: torch.Tensor,
    first: tuple[torch.Tensor, ...],
    keys: torch.Tensor,
    values: torch.Tensor,
    heads: int,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    # Everything before the first attention: slots, RoPE angles, embedding, layer 0's attention input.
    slots = start + torch.arange(tokens.shape[1], device=tokens.device)  # (n,)
    cos, sin = rope_angles(slots + rope_delta, inv_freq, embed.dtype)
    x = F.embedding(tokens, embed)  # (K, n, H)
    return x, attention_input(x, *first, cos, sin, keys, values, slots, heads, eps), slots, cos, sin


def between(
    x: torch.Tensor,
    attended: torch.Tensor,
    second: tuple[torch.Tensor, ...],
    first: tuple[torch.Tensor, ...],
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    heads: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Everything between two attention calls: the end of layer i and the start of layer i + 1, so a compiler
    # can fuse the residual add with the next norm.
    x = layer_output(x, attended, *second, eps)
    return x, attention_input(x, *first, cos, sin, keys, values, slots, heads, eps)


def prompt_input(x: torch.Tensor, pending: None, *args) -> tuple[torch.Tensor, torch.Tensor]:
    # The prompt pass's pieces carry (x, pending product) as the FP8 layers do; in bf16 nothing is pending.
    return x, attention_input(x, *args)


def prompt_output(x: torch.Tensor, attended: torch.Tensor, *args) -> tuple[torch.Tensor, None]:
    return layer_output(x, attended, *args), None


def end(
    x: torch.Tensor,
    attended: torch.Tensor,
    second: tuple[torch.Tensor, ...],
    final_norm: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    x = layer_output(x, attended, *second, eps)
    return F.rms_norm(x, (x.shape[-1],), final_norm, eps)
