"""Lean forward of the Qwen3-VL text decoder on the weights of the transformers model, into a static cache.

Answer tokens are text only, so their forward needs none of the vision tower, DeepStack or 3D M-RoPE: with
the same position on all three axes, interleaved M-RoPE is plain 1D RoPE. The prompt's text-decoder pass
(``prefill``) takes its inputs (embeddings with the image features in, M-RoPE angles, DeepStack features) from
transformers (decoding/prefill.py) and runs the same layers. What this adds over transformers' modules: q/k/v
and gate/up fused into one matrix product each, K/V written in place into a preallocated cache, attention
through a pluggable backend (attention/), no allocation that depends on the step (a forward can be captured
in a CUDA graph), and optionally the work between two attention calls compiled by ``torch.compile``. Knows
nothing about blocks, masks or sampling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding import fp8_fused, lean_layers
from wamdiff2_ros.decoding.config import WEIGHT_FORMATS
from wamdiff2_ros.decoding.fp8 import Fp8Weight, Fp8WeightOnly, quantize_weight, quantize_weight_only
from wamdiff2_ros.model.vocab import kept_embedding

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.attention.base import Attention
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

# Distinct (rows, tokens) shapes a compiled piece may specialise on before torch.compile gives up and runs
# eagerly; Dynamo's default of 8 is too few for a process that decodes B = 1..32 with K = 1..16.
COMPILE_SHAPES = 64


@dataclass(frozen=True)
class LeanLayer:
    """One decoder layer's weights; ``qkv`` and ``gate_up`` are concatenated copies, the rest are views (or,
    for FP8 weights, quantised copies of the four matrices)."""

    input_norm: torch.Tensor  # (H,)
    qkv: torch.Tensor | Fp8Weight | Fp8WeightOnly  # ((Hq + 2 Hkv) D, H): q_proj | k_proj | v_proj
    qk_norm: torch.Tensor  # (Hq + Hkv, D): q_norm's weight for each query head, then k_norm's per KV head
    out: torch.Tensor | Fp8Weight | Fp8WeightOnly  # (H, Hq D)
    post_norm: torch.Tensor  # (H,)
    gate_up: torch.Tensor | Fp8Weight | Fp8WeightOnly  # (2 I, H): gate_proj | up_proj
    down: torch.Tensor | Fp8Weight | Fp8WeightOnly  # (H, I)

    @property
    def first_half(self) -> tuple[torch.Tensor, ...]:
        """Weights read before attention (``attention_input``'s order)."""
        return self.input_norm, self.qkv, self.qk_norm

    @property
    def second_half(self) -> tuple[torch.Tensor, ...]:
        """Weights read after attention (``layer_output``'s order)."""
        return self.out, self.post_norm, self.gate_up, self.down


def compiled(function: Callable, dynamic: bool = False) -> Callable:
    """``function`` compiled by Inductor.

    Whole graph (a break is an error, never a silent eager fallback); by default one specialisation per shape
    (shapes are few and fixed, and a CUDA graph captures each), ``dynamic``: one for every length (the
    prompt's changes by a few tokens frame to frame); default mode (the CUDA graphs are ours, and autotuned
    matrix products would add minutes of compile time per shape).
    """
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILE_SHAPES)
    return torch.compile(function, fullgraph=True, dynamic=dynamic)


class LeanDecoder:
    """The text decoder of a Qwen3-VL model as plain tensor functions over its weights.

    Args:
        model: the transformers model; its weights are read (q/k/v and gate/up are concatenated once, the
            rest shared), never modified.
        compile: run the work between attention calls through ``torch.compile`` (the uncompiled functions
            are its exact twin): the answer forward's per shape, the prompt prefill's for any length.
        weights: ``bf16``: the model's own weights; ``fp8`` (W8A8) or ``fp8_weight_only`` (W8A16): the
            layers' four matrices quantised to FP8 at construction (decoding/fp8.py; the embedding and
            norms stay as they are), with ``fp8`` a full vocabulary's LM head too (``head``).
        fused: with ``fp8``, the layers of decoding/fp8_fused.py (the activation quantisation and the
            scales inside the norm, SiLU and rotary kernels); off, the unfused products, their twin.

    Raises:
        ValueError: the model uses attention biases or a RoPE type other than ``default`` (not implemented),
            or ``weights`` is not a known format.
    """

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        compile: bool = False,
        weights: str = "bf16",
        fused: bool = True,
    ) -> None:
        text = model.model.language_model
        config = model.config.text_config
        if config.attention_bias:
            raise ValueError("attention biases are not implemented in the lean forward")
        if config.rope_parameters.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {config.rope_parameters['rope_type']!r} is not implemented")
        if weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights {weights!r} is not one of {WEIGHT_FORMATS}")
        quantizers = {"fp8": quantize_weight, "fp8_weight_only": quantize_weight_only}
        matrix = quantizers.get(weights, lambda weight: weight)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.num_layers = config.num_hidden_layers
        self.eps = config.rms_norm_eps
        self.embed = text.embed_tokens.weight  # (V, H)
        kept = kept_embedding(model)
        self.rows = None if kept is None else kept.rows  # full-vocabulary id -> embedding row
        self.final_norm = text.norm.weight
        self.inv_freq = text.rotary_emb.inv_freq.float()  # (D / 2,)
        self.layers = [
            LeanLayer(
                input_norm=layer.input_layernorm.weight,
                qkv=matrix(
                    torch.cat(
                        [
                            layer.self_attn.q_proj.weight,
                            layer.self_attn.k_proj.weight,
                            layer.self_attn.v_proj.weight,
                        ]
                    )
                ),
                qk_norm=torch.cat(
                    [
                        layer.self_attn.q_norm.weight.expand(self.heads, -1),
                        layer.self_attn.k_norm.weight.expand(self.kv_heads, -1),
                    ]
                ),
                out=matrix(layer.self_attn.o_proj.weight),
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=matrix(torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])),
                down=matrix(layer.mlp.down_proj.weight),
            )
            for layer in text.layers
        ]
        self.compile, self.weights = compile, weights
        self.fused = fused and weights == "fp8"
        # W8A8: the LM head too, for the steps that score every column (no grammar; fp8.answer_logits). A
        # reduced vocabulary's head is a few hundred rows: it stays as it is.
        self.head = quantize_weight(model.lm_head.weight) if weights == "fp8" and kept is None else None
        pieces = (
            lean_layers.begin,
            lean_layers.between,
            lean_layers.end,
            lean_layers.prompt_input,
            lean_layers.prompt_output,
        )
        if self.fused:
            pieces = (
                fp8_fused.begin,
                fp8_fused.between,
                fp8_fused.end,
                fp8_fused.attention_input,
                fp8_fused.layer_output,
            )
        wrap = compiled if compile else (lambda function: function)
        self._begin, self._between, self._end = (wrap(piece) for piece in pieces[:3])
        wrap_any_length = (lambda f: compiled(f, dynamic=True)) if compile else (lambda function: function)
        self._prompt_input, self._prompt_output = (wrap_any_length(piece) for piece in pieces[3:])

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
        attention.prepare(start, tokens.shape[1])
        if self.rows is not None:
            tokens = self.rows[tokens]
        layers, keys, values = self.layers, cache.keys, cache.values
        # Compiled, the work between two attention calls is the four GEMMs and a few fused kernels
        # (docs/REFERENCE.md §7.3: at 2b sizes a forward is bound by kernel count, not bytes).
        x, q, slots, cos, sin = self._begin(
            tokens,
            start,
            rope_delta,
            self.inv_freq,
            self.embed,
            layers[0].first_half,
            keys[0],
            values[0],
            self.heads,
            self.eps,
        )
        # The fused FP8 layers take the attention output quantised, where the backend's kernel can do it.
        attend = attention.attend
        if self.fused and getattr(attention, "quantizes_output", False):
            attend = attention.attend_quantized
        for index in range(1, self.num_layers):
            x, q = self._between(
                x,
                attend(index - 1, q),
                layers[index - 1].second_half,
                layers[index].first_half,
                cos,
                sin,
                keys[index],
                values[index],
                slots,
                self.heads,
                self.eps,
            )
        return self._end(x, attend(self.num_layers - 1, q), layers[-1].second_half, self.final_norm, self.eps)

    @torch.no_grad()
    def prefill(
        self,
        embeds: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attention: Attention,
        deepstack: Callable[[int, torch.Tensor], torch.Tensor],
    ) -> None:
        """Write the prompt's K/V into slots [0, P) of one cache row (compiled for any P when ``compile``).

        Args:
            embeds: (1, P, H) input embeddings, image features in place.
            cos: (P, 1, D) M-RoPE cos (3D positions folded in by transformers' rotary module).
            sin: (P, 1, D).
            keys: (layers, 1, slots, Hkv, D) the row's K buffers (a view of the cache).
            values: the row's V buffers.
            attention: a backend over that row, planned for P queries from slot 0.
            deepstack: ``(layer, x) -> x`` with that layer's DeepStack features added (identity when none).
        """
        start = torch.zeros((), dtype=torch.int64, device=embeds.device)
        attention.prepare(start, embeds.shape[1])
        slots = torch.arange(embeds.shape[1], device=embeds.device)
        x, pending = embeds, None  # pending: the FP8 layers' down product, added by the next norm
        for index, layer in enumerate(self.layers):
            x, q = self._prompt_input(
                x,
                pending,
                *layer.first_half,
                cos,
                sin,
                keys[index],
                values[index],
                slots,
                self.heads,
                self.eps,
            )
            if index + 1 < self.num_layers:  # the last layer's output feeds only logits, not needed here
                attended = attention.attend(index, q)
                x, pending = self._prompt_output(x, attended, *layer.second_half, self.eps)
                x = deepstack(index, x)  # an addition: before or after the pending one, the same sum
