"""FP8 weights for the lean forward: ``decoder.weights: fp8`` (W8A8) and ``fp8_weight_only`` (W8A16).

A weight matrix (N, K) is stored as e4m3 with one fp32 scale per output row (its absolute maximum over 448,
e4m3's largest finite value), computed once at load from the bf16 checkpoint. At each product the
activations (M, K) are quantised the same way per row (per token); ``torch._scaled_mm`` multiplies the two
FP8 operands into fp32 and the two scale vectors are applied after it, by an elementwise multiply. The
scales are not handed to ``_scaled_mm`` itself: on the H200 its row-wise-scaled kernel is slower than bf16
at the decoder's M = 32..256 (8.2 vs 5.1 us for q/k/v at M = 32), the unscaled one faster. The whole
forward is still slower than bf16, since the quantisation and the multiply are kernels of their own
(docs/BENCHMARKS.md, "FP8 weights").
``dequantized_linear`` is the exact slow twin: the same quantised operands, dequantised to fp32 and
multiplied by F.linear. ``fp8_weight_only`` keeps the same weights (``Fp8WeightOnly``) and leaves the
activations in bf16: a Triton kernel converts the weights in registers (decoding/fp8_kernel.py).
``answer_logits`` scores a step through the LM head in FP8 where every column is scored (``fp8``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448


class Fp8Weight(NamedTuple):
    """A weight matrix in FP8 (a tuple: torch.compile and CUDA graphs take it like any tensors)."""

    data: torch.Tensor  # (N, K) float8_e4m3fn
    scale: torch.Tensor  # (1, N) float32: row n of the weight is data[n] * scale[0, n]
    one: torch.Tensor  # () float32 1.0: _scaled_mm's own scales (kept here: no allocation per product)


class Fp8WeightOnly(NamedTuple):
    """An FP8 weight matrix for bf16 activations (W8A16: ``fp8_kernel.w8a16_linear``)."""

    data: torch.Tensor  # (N, K) float8_e4m3fn
    scale: torch.Tensor  # (1, N) float32


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (M, K) as e4m3 with one fp32 scale per row: (M, K) FP8, (M, 1) scales. An all-zero row gets
    a tiny scale (its values stay zero)."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / FP8_MAX).clamp_min(1e-12)
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def quantize_weight(weight: torch.Tensor, chunk: int = 16_384) -> Fp8Weight:
    """A bf16 (or fp32) weight (N, K) in FP8 with per-output-row scales, ``chunk`` rows at a time (the LM
    head's 151,936 rows at once would take two fp32 copies, 2.5 GB at the 2b preset)."""
    weight = weight.detach()
    data = torch.empty(weight.shape, dtype=FP8, device=weight.device)
    scale = torch.empty((weight.shape[0], 1), dtype=torch.float32, device=weight.device)
    for first in range(0, weight.shape[0], chunk):
        rows = slice(first, first + chunk)
        data[rows], scale[rows] = quantize_rows(weight[rows])
    return Fp8Weight(data, scale.reshape(1, -1), torch.ones((), device=weight.device))


def quantize_weight_only(weight: torch.Tensor) -> Fp8WeightOnly:
    """``quantize_weight``'s FP8 weight for W8A16 products."""
    data, scale = quantize_rows(weight.detach())
    return Fp8WeightOnly(data, scale.reshape(1, -1))


def linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight | Fp8WeightOnly) -> torch.Tensor:
    """``x @ weight.T``: a plain weight by F.linear, FP8 by ``fp8_linear`` or ``weight_only_linear``."""
    if isinstance(weight, Fp8Weight):
        return fp8_linear(x, weight)
    if isinstance(weight, Fp8WeightOnly):
        return weight_only_linear(x, weight)
    return F.linear(x, weight)


def weight_only_linear(x: torch.Tensor, weight: Fp8WeightOnly) -> torch.Tensor:
    """``x`` (..., K) times an FP8 weight (N, K), activations as they are: the W8A16 kernel (its CPU
    implementation is the dequantised twin)."""
    from wamdiff2_ros.decoding.fp8_kernel import w8a16_linear

    out = w8a16_linear(x.reshape(-1, x.shape[-1]), weight.data, weight.scale)
    return out.view(*x.shape[:-1], -1)


def fp8_linear(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    """``x`` (..., K) times an FP8 weight (N, K) -> (..., N) in x's dtype, through ``torch._scaled_mm``."""
    rows, scale = quantize_rows(x.reshape(-1, x.shape[-1]))
    out = torch._scaled_mm(rows, weight.data.t(), scale_a=scale, scale_b=weight.scale, out_dtype=x.dtype)
    return out.view(*x.shape[:-1], -1)


def answer_logits(
    model: torch.nn.Module, hidden: torch.Tensor, token_ids: torch.Tensor | None, head: Fp8Weight | None
) -> torch.Tensor:
    """``model/forward.py head_logits`` of final hidden states (K, n, H), through ``head``, the LM head in
    FP8 (``LeanDecoder.head``), where every column is scored: (K, n, V) float32. The full head is 0.62 GB
    of bf16 a step at the 2b preset (151,936 x 2,048): ~155 us at 32 rows on the H200 against ~85 for the
    unscaled FP8 product, ~224 against ~165 at K = 8's 256 rows (docs/BENCHMARKS.md, "FP8 weights";
    docs/log/fp8-h200-2026-12-01.json). A grammar's few columns (``token_ids``) keep the model's own
    rows: gathering them costs little."""
    from wamdiff2_ros.model.forward import head_logits

    if head is None or token_ids is not None:
        return head_logits(model, hidden, token_ids)
    rows, scale = quantize_rows(hidden.reshape(-1, hidden.shape[-1]))
    raw = torch._scaled_mm(rows, head.data.t(), scale_a=head.one, scale_b=head.one, out_dtype=torch.bfloat16)
    # raw * scale is fp32 (type promotion); the second scale in place: one pass fewer where not compiled
    return (raw * scale).mul_(head.scale).view(*hidden.shape[:-1], -1)


def dequantized_linear(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    """``fp8_linear``'s twin: the same FP8 operands dequantised to fp32, multiplied by F.linear."""
    rows, scale = quantize_rows(x.reshape(-1, x.shape[-1]))
    out = F.linear(rows.float() * scale, weight.data.float() * weight.scale.reshape(-1, 1))
    return out.to(x.dtype).view(*x.shape[:-1], -1)
