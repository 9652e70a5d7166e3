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
    qk_norm: torch.Tensor  # (Hq + Hkv, D): q_norm's weight for each query head, then k_norm's per KV head
    out: torch.Tensor  # (H, Hq D)
    post_norm: torch.Tensor  # (H,)
    gate_up: torch.Tensor  # (2 I, H): gate_proj | up_proj
    down: torch.Tensor  # (H, I)


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
                qk_norm=torch.cat(
                    [
                        layer.self_attn.q_norm.weight.expand(self.heads, -1),
                        layer.self_attn.k_norm.weight.expand(self.kv_heads, -1),
                    ]
                ),
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
        rope_delta: torch.Tensor,
        cache: StaticKVCache,
        attention: Attention,
    ) -> torch.Tensor:
        """Final hidden states of ``tokens`` at cache slots ``start + [0, n)``; their K/V are written there.

        Args:
            tokens: (K, n) int64 on the weights' device.
            start: () int64 device scalar, the first slot; a tensor (not an int) so that a captured graph
                reads the current value at replay.
            rope_delta: () int64 device scalar, the M-RoPE offset of text after the prompt (slot i has
                position i + rope_delta); a tensor like ``start``, since it changes with the image.
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
        hidden, dim, qk_heads = self.embed.shape[1], self.head_dim, self.heads + self.kv_heads
        x = F.embedding(tokens, self.embed)  # (K, n, H)
        # Few, fused kernels: at 2b sizes a forward is bound by kernel count, not bytes (gpu_probe.md).
        # F.rms_norm rounds once after the weight where transformers rounds before it (equal in fp32).
        for index, layer in enumerate(self.layers):
            h = F.rms_norm(x, (hidden,), layer.input_norm, self.eps)
            qkv = F.linear(h, layer.qkv).view(rows, length, qk_heads + self.kv_heads, dim)
            # q and k heads normed and rotated together; the weight multiply after the norm keeps the
            # rounding of transformers' q_norm/k_norm.
            qk = _rotate(F.rms_norm(qkv[:, :, :qk_heads], (dim,), eps=self.eps) * layer.qk_norm, cos, sin)
            q, k = qk.split([self.heads, self.kv_heads], dim=2)
            cache.store(index, slots, k, qkv[:, :, qk_heads:])
            x = x + F.linear(attention.attend(index, q), layer.out)
            gate, up = F.linear(F.rms_norm(x, (hidden,), layer.post_norm, self.eps), layer.gate_up).chunk(
                2, dim=-1
            )
            x = x + F.linear(F.silu(gate) * up, layer.down)
        return F.rms_norm(x, (hidden,), self.final_norm, self.eps)
