"""W8A16: bf16 activations times FP8 weights, the weights converted to bf16 in registers (a Triton kernel).

The decode's products at M = 32..256 rows are bound by reading the weights, so reading e4m3 bytes halves
their floor without quantising the activations (what makes W8A8 slower here: docs/BENCHMARKS.md, "FP8
weights"). One program computes a BLOCK_M x BLOCK_N tile of the output over all of K, accumulating in fp32,
and applies the weight's row scales before its single store. ``wamdiff2::w8a16_linear`` is a torch custom op
(so torch.compile and CUDA graphs treat it as one opaque kernel); its CPU implementation is the exact slow
twin: the dequantised weight through F.linear in fp32. Block sizes, warps and stages are fixed per shape
(``kernel_config``; no autotuning: a benchmark inside a CUDA-graph capture is illegal);
``tools/probes/gpu_kernels.py w8a16`` sweeps them per shape, which is where to tune them.
Triton is imported only when a CUDA tensor reaches the op (the CPU machines have none).
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import torch.nn.functional as F


class KernelConfig(NamedTuple):
    """One launch's tile (BLOCK_M x BLOCK_N outputs over BLOCK_K-deep steps), warps and pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    warps: int = 4
    stages: int = 3


# The H200 sweep's fastest launch per 2b product (N, K) and M bucket (tools/probes/gpu_kernels.py w8a16,
# docs/log/w8a16-sweep-h200-2026-12-02.json). Even these lose to cuBLAS bf16 at every layer shape (M = 32:
# 44 against 34 us per layer); only the LM head at M = 32 is faster (109 against 151 us).
SWEPT = {
    (32, 4096, 2048): KernelConfig(32, 16, 256),
    (32, 2048, 2048): KernelConfig(32, 16, 512),
    (32, 2048, 6144): KernelConfig(32, 16, 512),
    (64, 4096, 2048): KernelConfig(64, 32, 256),
    (64, 2048, 2048): KernelConfig(64, 16, 512),
    (64, 12288, 2048): KernelConfig(64, 32, 128),
    (64, 2048, 6144): KernelConfig(64, 16, 512),
    (64, 151936, 2048): KernelConfig(64, 128, 128),
    (128, 2048, 2048): KernelConfig(64, 32, 256),
    (128, 12288, 2048): KernelConfig(64, 128, 128),
    (128, 2048, 6144): KernelConfig(64, 32, 256),
    (128, 151936, 2048): KernelConfig(64, 128, 128),
    (256, 4096, 2048): KernelConfig(64, 64, 128),
    (256, 2048, 2048): KernelConfig(64, 32, 128),
    (256, 12288, 2048): KernelConfig(64, 128, 128, warps=8),
    (256, 2048, 6144): KernelConfig(64, 32, 128),
    (256, 151936, 2048): KernelConfig(64, 128, 128),
}


def kernel_config(m: int, n: int, k: int) -> KernelConfig:
    """The launch of an (m, k) x (k, n) product: the sweep's winner for the 2b shapes (``SWEPT``, by the
    smallest swept M at or above ``m``), else M covered by as few tiles as tl.dot allows and N cut finely
    enough that a 2,048-column product still gives ~128 programs on a 132-SM H200."""
    bucket = next((rows for rows in (32, 64, 128, 256) if m <= rows), None)
    if (bucket, n, k) in SWEPT:
        return SWEPT[bucket, n, k]
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    block_n = 16 if n <= 2048 else 32 if n <= 4096 else 64
    return KernelConfig(block_m, block_n, 128)


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def w8a16(
        x_ptr, w_ptr, scale_ptr, out_ptr, m, n, k, stride_xm, stride_wn, stride_om,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRETED: tl.constexpr,
    ):  # fmt: skip
        rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        depth = tl.arange(0, BLOCK_K)
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, k, BLOCK_K):
            inner = start + depth
            x = tl.load(
                x_ptr + rows[:, None] * stride_xm + inner[None, :],
                mask=(rows[:, None] < m) & (inner[None, :] < k),
                other=0.0,
            )
            w = tl.load(  # (BLOCK_K, BLOCK_N): each column is a weight row, read along its contiguous K
                w_ptr + cols[None, :] * stride_wn + inner[:, None],
                mask=(cols[None, :] < n) & (inner[:, None] < k),
                other=0.0,
            )
            if INTERPRETED:  # Triton's interpreter multiplies bf16 operands' raw bits: give it fp32
                accumulator += tl.dot(x.to(tl.float32), w.to(tl.float32))
            else:
                accumulator += tl.dot(x, w.to(tl.bfloat16))
        scale = tl.load(scale_ptr + cols, mask=cols < n, other=0.0)
        result = (accumulator * scale[None, :]).to(out_ptr.dtype.element_ty)
        tl.store(
            out_ptr + rows[:, None] * stride_om + cols[None, :],
            result,
            mask=(rows[:, None] < m) & (cols[None, :] < n),
        )

    return w8a16


@torch.library.custom_op("wamdiff2::w8a16_linear", mutates_args=())
def w8a16_linear(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x`` (M, K) bf16 times the FP8 weight ``data`` (N, K) with row scales ``scale`` (1, N) -> (M, N)."""
    if x.device.type != "cuda":  # the twin: dequantised, fp32, rounded once to x's dtype
        return F.linear(x.float(), data.float() * scale.reshape(-1, 1)).to(x.dtype)
    return launch(x, data, scale)


def launch(
    x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, config: KernelConfig | None = None
) -> torch.Tensor:
    """The Triton kernel on ``x``'s device, with ``config`` (default: ``kernel_config``'s); a CPU tensor
    runs under ``TRITON_INTERPRET=1``: how the kernel is checked where there is no GPU."""
    import triton

    m, k = x.shape
    n = data.shape[0]
    x = x.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    config = config or kernel_config(m, n, k)
    grid = (triton.cdiv(n, config.block_n), triton.cdiv(m, config.block_m))
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    _kernel()[grid](
        x, data, scale, out, m, n, k, x.stride(0), data.stride(0), out.stride(0),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, INTERPRETED=interpreted,
        num_warps=config.warps, num_stages=config.stages,
    )  # fmt: skip
    return out


@w8a16_linear.register_fake
def _(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], data.shape[0]))
