"""Probe (issue 19): FP8 products as Triton kernels that swap A and B, so that an epilogue can be fused.

The fused FP8 layer is 4 cuBLAS products and 5 kernels of our own around them (decoding/fp8_fused.py); a
kernel costs 3-5 us at the decoder's 32 rows whatever its bytes (docs/BENCHMARKS.md, the H100 profile).
Fewer kernels means products with our epilogues, which cuBLAS cannot take. The W8A16 Triton kernel lost to
cuBLAS (mma.sync on 32-row tiles); here the weight's rows are the MMA's M side (64 or 128, what Hopper's
wgmma needs) and the 32 tokens its N side, both operands FP8.

- ``gemm``: out (M, N) = x8 @ w8^T times the row and column scales, bf16.
- ``gate_up_silu``: the gate/up product with SiLU(gate) x up in its epilogue, quantised to FP8 with one scale
  per token and group of G columns (the tile's), so no kernel of its own is left for the activation.
- ``down_grouped``: the down product over those group-scaled activations (each K step of G scaled by its
  group's scale before it is accumulated).

Run on the device machine through ``gpu_kernels.py OUT swap_ab``; on the CPU ``TRITON_INTERPRET=1 python3
tools/probes/swap_ab.py`` checks the three kernels against their torch twins at small sizes.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

FP8 = torch.float8_e4m3fn
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _gemm(
    w_ptr, x_ptr, ws_ptr, xs_ptr, out_ptr, n, k,
    M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    tokens = tl.arange(0, M)
    depth = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, M), tl.float32)
    for first in range(0, k, BLOCK_K):
        w = tl.load(w_ptr + rows[:, None] * k + (first + depth)[None, :])
        x = tl.load(x_ptr + tokens[:, None] * k + (first + depth)[None, :])
        acc = tl.dot(w, tl.trans(x), acc)
    acc = acc * tl.load(ws_ptr + rows)[:, None] * tl.load(xs_ptr + tokens)[None, :]
    tl.store(out_ptr + tokens[None, :] * n + rows[:, None], acc.to(out_ptr.dtype.element_ty))


@triton.jit
def _gate_up_silu(
    w_ptr, x_ptr, ws_ptr, xs_ptr, q_ptr, qs_ptr, half, k,
    M: tl.constexpr, G: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    group = tl.program_id(0)
    rows = group * G + tl.arange(0, G)
    tokens = tl.arange(0, M)
    depth = tl.arange(0, BLOCK_K)
    gate = tl.zeros((G, M), tl.float32)
    up = tl.zeros((G, M), tl.float32)
    for first in range(0, k, BLOCK_K):
        x = tl.trans(tl.load(x_ptr + tokens[:, None] * k + (first + depth)[None, :]))
        gate = tl.dot(tl.load(w_ptr + rows[:, None] * k + (first + depth)[None, :]), x, gate)
        up = tl.dot(tl.load(w_ptr + (half + rows)[:, None] * k + (first + depth)[None, :]), x, up)
    token_scale = tl.load(xs_ptr + tokens)[None, :]
    gate = (gate * tl.load(ws_ptr + rows)[:, None] * token_scale).to(tl.bfloat16).to(tl.float32)
    up = (up * tl.load(ws_ptr + half + rows)[:, None] * token_scale).to(tl.bfloat16).to(tl.float32)
    act = tl.math.div_rn(gate, 1.0 + tl.exp(-gate)).to(tl.bfloat16).to(tl.float32) * up
    act = act.to(tl.bfloat16).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(act), axis=0), 448.0), 1e-12)  # (M,): per token
    q = tl.minimum(tl.maximum(tl.math.div_rn(act, scale[None, :]), -448.0), 448.0)
    tl.store(q_ptr + tokens[None, :] * half + rows[:, None], q.to(q_ptr.dtype.element_ty))
    tl.store(qs_ptr + tokens * (half // G) + group, scale)


@triton.jit
def _down_grouped(
    w_ptr, q_ptr, ws_ptr, qs_ptr, out_ptr, n, k,
    M: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    tokens = tl.arange(0, M)
    depth = tl.arange(0, G)
    acc = tl.zeros((BLOCK_N, M), tl.float32)
    for group in range(0, k // G):
        w = tl.load(w_ptr + rows[:, None] * k + (group * G + depth)[None, :])
        x = tl.load(q_ptr + tokens[:, None] * k + (group * G + depth)[None, :])
        part = tl.dot(w, tl.trans(x))
        acc += part * tl.load(qs_ptr + tokens * (k // G) + group)[None, :]
    acc = acc * tl.load(ws_ptr + rows)[:, None]
    tl.store(out_ptr + tokens[None, :] * n + rows[:, None], acc.to(out_ptr.dtype.element_ty))


def gemm(x8, xs, w8, ws, block_n=128, block_k=128, warps=4, stages=4):
    """(M, K) FP8 x (N, K) FP8 with (M,) and (N,) scales -> (M, N) bf16."""
    m, k = x8.shape
    n = w8.shape[0]
    out = torch.empty((m, n), dtype=torch.bfloat16, device=x8.device)
    _gemm[(n // block_n,)](w8, x8, ws, xs, out, n, k, m, block_n, block_k, num_warps=warps, num_stages=stages)
    return out


def gate_up_silu(x8, xs, w8, ws, group=64, block_k=128, warps=4, stages=4):
    """The gate/up product (gate rows first, then up), SiLU(gate) x up, quantised per token and group:
    (M, N/2) FP8 (fp32 under the interpreter) and (M, N/2/group) scales."""
    m, k = x8.shape
    half = w8.shape[0] // 2
    dtype = torch.float32 if INTERPRETED else FP8
    q = torch.empty((m, half), dtype=dtype, device=x8.device)
    scales = torch.empty((m, half // group), dtype=torch.float32, device=x8.device)
    _gate_up_silu[(half // group,)](
        w8, x8, ws, xs, q, scales, half, k, m, group, block_k, num_warps=warps, num_stages=stages
    )
    return q.to(FP8), scales


def down_grouped(q8, qs, w8, ws, block_n=128, warps=4, stages=4):
    """(M, K) FP8 with (M, K/G) group scales x (N, K) FP8 with (N,) scales -> (M, N) bf16."""
    m, k = q8.shape
    n = w8.shape[0]
    group = k // qs.shape[1]
    out = torch.empty((m, n), dtype=torch.bfloat16, device=q8.device)
    _down_grouped[(n // block_n,)](
        w8, q8, ws, qs, out, n, k, m, block_n, group, num_warps=warps, num_stages=stages
    )
    return out


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``x`` in FP8 with one scale each: (R, C) FP8, (R,) fp32."""
    scale = (x.abs().amax(dim=-1).float() / 448.0).clamp_min(1e-12)
    return (x.float() / scale[:, None]).clamp(-448, 448).to(FP8), scale


def twin_gemm(x8, xs, w8, ws):
    return ((x8.float() * xs[:, None]) @ (w8.float() * ws[:, None]).T).to(torch.bfloat16)


def twin_mlp(x8, xs, gate_up8, gate_up_s, down8, down_s):
    """The MLP in full precision from the same quantised inputs: SiLU(gate) x up, then down."""
    h = (x8.float() * xs[:, None]) @ (gate_up8.float() * gate_up_s[:, None]).T
    half = h.shape[1] // 2
    act = torch.nn.functional.silu(h[:, :half]) * h[:, half:]
    return act @ (down8.float() * down_s[:, None]).T


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


if __name__ == "__main__":  # the CPU check under the interpreter
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu"
    m, hidden, inner = 32, 256, 512
    x8, xs = quantize(torch.randn(m, hidden, device=device))
    w8, ws = quantize(torch.randn(384, hidden, device=device) * 0.05)
    print("gemm", relative(gemm(x8, xs, w8, ws, 128, 64), twin_gemm(x8, xs, w8, ws)))
    gu8, gus = quantize(torch.randn(2 * inner, hidden, device=device) * 0.05)
    d8, ds = quantize(torch.randn(hidden, inner, device=device) * 0.05)
    q8, qs = gate_up_silu(x8, xs, gu8, gus, 64, 64)
    out = down_grouped(q8, qs, d8, ds, 128)
    print("mlp", relative(out, twin_mlp(x8, xs, gu8, gus, d8, ds)))
