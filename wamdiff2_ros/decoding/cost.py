"""Bytes and FLOPs of one text-decoder forward, and the floors they set (ms per forward, ms per answer token).

A forward must read every layer weight and the LM head once (the embedding table only one row per token), plus
the K/V it attends over; the larger of bytes / bandwidth and FLOPs / matrix rate is the floor no
implementation beats. Leaves out the vision tower (prefill only) and activations (small at these sizes).
Peaks are arguments: the H200's measured 4.3 TB/s copy rate (docs/REFERENCE.md §7.1) is the default,
the datasheet's 4.8 TB/s beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig

H200_MEASURED_BYTES_PER_S = 4.3e12  # device-to-device copy, read + write (docs/REFERENCE.md §7.1)
H200_DATASHEET_BYTES_PER_S = 4.8e12
H200_DENSE_BF16_FLOPS = (
    7.9e14  # measured bf16 matrix rate on random data (docs/REFERENCE.md §7.1: 788 TFLOP/s)
)


@dataclass(frozen=True)
class ForwardCost:
    """Cost of one forward of ``tokens`` queries per row over ``context`` keys, for ``rows`` rows."""

    weight_bytes: int  # layer weights and LM head, each read once
    kv_bytes: int  # K/V read by attention
    flops: int  # matrix products (2 per multiply-add) and attention

    def floor_ms(
        self, bytes_per_s: float = H200_MEASURED_BYTES_PER_S, flops_per_s: float = H200_DENSE_BF16_FLOPS
    ) -> float:
        """The larger of the memory time and the arithmetic time, in milliseconds."""
        return 1e3 * max((self.weight_bytes + self.kv_bytes) / bytes_per_s, self.flops / flops_per_s)


def layer_params(text_config: PretrainedConfig) -> int:
    """Parameters of one decoder layer (projections, MLP, norms)."""
    hidden, inter, dim = text_config.hidden_size, text_config.intermediate_size, text_config.head_dim
    q_heads, kv_heads = text_config.num_attention_heads, text_config.num_key_value_heads
    attention = hidden * (q_heads + 2 * kv_heads) * dim + q_heads * dim * hidden
    return attention + 3 * hidden * inter + 2 * hidden + 2 * dim


def forward_cost(
    text_config: PretrainedConfig,
    tokens: int,
    context: int,
    rows: int = 1,
    bytes_per_value: int = 2,
    head_columns: int | None = None,
) -> ForwardCost:
    """Bytes and FLOPs of one forward.

    Args:
        text_config: the text decoder's config (``model.config.text_config`` or a preset's).
        tokens: queries per row (B, 2B for a fused forward, 1 for AR).
        context: keys each query reads (prompt + answer so far + the block).
        rows: K candidate rows.
        bytes_per_value: 2 for bf16.
        head_columns: LM-head columns scored (the grammar's); the whole vocabulary when None.

    Returns:
        The cost.
    """
    layers = text_config.num_hidden_layers
    head = (head_columns or text_config.vocab_size) * text_config.hidden_size
    params = layers * layer_params(text_config) + head + text_config.hidden_size
    kv_per_token = layers * 2 * text_config.num_key_value_heads * text_config.head_dim * bytes_per_value
    attention_flops = 4 * layers * text_config.num_attention_heads * text_config.head_dim * tokens * context
    return ForwardCost(
        weight_bytes=params * bytes_per_value,
        kv_bytes=rows * context * kv_per_token,
        flops=rows * (2 * tokens * params + attention_flops),
    )


def block_floor_ms_per_token(
    text_config: PretrainedConfig, block_size: int, steps: int, context: int, clean_pass: bool, rows: int = 1
) -> float:
    """Floor of block decoding: (S + c) forwards per block of B tokens, c = 1 with the extra clean pass.

    Args:
        text_config: the text decoder's config.
        block_size: B.
        steps: S denoising forwards per block.
        context: keys per query (a representative mid-answer length).
        clean_pass: reference cache order (one more forward per block); False for the fused order.
        rows: K candidates (tokens are counted for one answer).

    Returns:
        Milliseconds per answer token at the default peaks.
    """
    forward = forward_cost(text_config, block_size, context, rows).floor_ms()
    return (min(steps, block_size) + int(clean_pass)) * forward / block_size
