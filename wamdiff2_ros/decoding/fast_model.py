"""Lean forward of the Qwen3-VL text decoder over answer tokens, on the weights of the transformers model.

Answer tokens are text only, so the forward needs none of the vision tower, DeepStack or 3D M-RoPE: with the
same position on all three axes, interleaved M-RoPE is plain 1D RoPE. The prompt (vision included) is still
encoded by transformers (static_cache.py). What this adds over transformers' modules: q/k/v and gate/up
fused into one matrix product each, K/V written in place into a preallocated cache, attention through a
pluggable backend (attention/), and no allocation that depends on the step, so a forward can be captured in a
CUDA graph. Knows nothing about blocks, masks or sampling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F
from transformers import Qwen3VLForConditionalGeneration

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.static_cache import StaticKVCache


class Attention(Protocol):
    """What the forward needs from an attention backend (attention/sdpa.py, attention/flashinfer.py)."""

    def plan(self, start: int, length: int) -> None:
        """Host-side setup of a forward of ``length`` queries from slot ``start``, outside any CUDA graph."""

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Device-side setup of one forward of ``length`` queries from slot ``start`` (a device scalar)."""

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(K, n, Hq, D) queries over the cache of ``layer`` -> (K, n, Hq * D)."""


@dataclass(frozen=True)
class LeanLayer:
    """One decoder layer's weights; ``qkv`` and ``gate_up`` are concatenated copies, the rest are views."""

    input_norm: torch.Tensor  # (H,)
    qkv: torch.Tensor  # ((Hq + 2 Hkv) D, H): q_proj | k_proj | v_proj
    q_norm: torch.Tensor  # (D,)
    k_norm: torch.Tensor  # (D,)
    out: torch.Tensor  # (H, Hq D)
    post_norm: torch.Tensor  # (H,)
    gate_up: torch.Tensor  # (2 I, H): gate_proj | up_proj
    down: torch.Tensor  # (H, I)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in float32, rounded to the input dtype before the weight, as transformers' Qwen3 norm does."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (K, n, heads, D); cos/sin: (n, 1, D). Half-split rotation (transformers' rotate_half layout).
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class LeanDecoder:
    """The text decoder of a Qwen3-VL model as plain tensor functions over its weights.

    Args:
        model: the transformers model; its weights are read (q/k/v and gate/up are concatenated once, the
            rest shared), never modified.

    Raises:
        ValueError: the model uses attention biases or a RoPE type other than ``default`` (not implemented).
    """

    def __init__(self, model: Qwen3VLForConditionalGeneration) -> None:
        text = model.model.language_model
        config = model.config.text_config
        if config.attention_bias:
            raise ValueError("attention biases are not implemented in the lean forward")
        if config.rope_parameters.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {config.rope_parameters['rope_type']!r} is not implemented")
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.num_layers = config.num_hidden_layers
        self.eps = config.rms_norm_eps
        self.embed = text.embed_tokens.weight  # (V, H)
        self.final_norm = text.norm.weight
        self.inv_freq = text.rotary_emb.inv_freq.float()  # (D / 2,)
        self.layers = [
            LeanLayer(
                input_norm=layer.input_layernorm.weight,
                qkv=torch.cat(
                    [
                        layer.self_attn.q_proj.weight,
                        layer.self_attn.k_proj.weight,
                        layer.self_attn.v_proj.weight,
                    ]
                ),
                q_norm=layer.self_attn.q_norm.weight,
                k_norm=layer.self_attn.k_norm.weight,
                out=layer.self_attn.o_proj.weight,
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                down=layer.mlp.down_proj.weight,
            )
            for layer in text.layers
        ]

    @torch.no_grad()
    def forward(
        self,
        tokens: torch.Tensor,
        start: torch.Tensor,
        rope_delta: int,
        cache: StaticKVCache,
        attention: Attention,
    ) -> torch.Tensor:
        """Final hidden states of ``tokens`` at cache slots ``start + [0, n)``; their K/V are written there.

        Args:
            tokens: (K, n) int64 on the weights' device.
            start: () int64 device scalar, the first slot; a tensor (not an int) so that a captured graph
                reads the current value at replay.
            rope_delta: M-RoPE offset of text after the prompt (slot i has position i + rope_delta).
            cache: the static cache whose slots are written.
            attention: the attention backend, already planned for this forward.

        Returns:
            (K, n, H) hidden states after the final norm (``model/forward.py head_logits`` scores them).
        """
        rows, length = tokens.shape
        slots = start + torch.arange(length, device=tokens.device)  # (n,)
        freqs = (slots + rope_delta).float()[:, None] * self.inv_freq  # (n, D / 2)
        angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # (n, 1, D)
        cos, sin = angles.cos().to(self.embed.dtype), angles.sin().to(self.embed.dtype)
        attention.prepare(start, length)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        x = F.embedding(tokens, self.embed)  # (K, n, H)
        for index, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, self.eps)
            q, k, v = F.linear(h, layer.qkv).split([q_size, kv_size, kv_size], dim=-1)
            q = rms_norm(q.view(rows, length, self.heads, self.head_dim), layer.q_norm, self.eps)
            k = rms_norm(k.view(rows, length, self.kv_heads, self.head_dim), layer.k_norm, self.eps)
            cache.store(
                index, slots, _rotate(k, cos, sin), v.view(rows, length, self.kv_heads, self.head_dim)
            )
            x = x + F.linear(attention.attend(index, _rotate(q, cos, sin)), layer.out)
            gate, up = F.linear(rms_norm(x, layer.post_norm, self.eps), layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        return rms_norm(x, self.final_norm, self.eps)
