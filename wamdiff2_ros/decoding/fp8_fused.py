"""W8A8 layers with the activation quantisation fused into the kernels that make the activations.

The unfused ``fp8`` forward (``lean_layers`` over ``fp8.linear``) quantises each product's input in a
kernel of its own and applies the two scale vectors in another: ~20 us per layer on the H200, more than the
FP8 products save (docs/BENCHMARKS.md, "FP8 weights"). Here every product is the fast unit-scaled
``torch._scaled_mm`` (its raw output in the activations' dtype: bf16 keeps fp32's range, so nothing
overflows), or at 32-64 rows a swap-AB Triton kernel where that measured faster (``SWAP_AB``: 1.8 % of
the forward's kernel time), and the scales go where the next kernel reads that output anyway:

- ``add_norm_quant``: residual add of a raw product (scaled), RMSNorm, per-row FP8 quantisation: one kernel
  before q/k/v and one before gate/up. The MLP's down product is added by the next layer's kernel, so a
  residual add never has a kernel of its own.
- ``rope_store``: the q/k/v product's scales, q/k RMSNorm, rotary, K/V written to the cache: one kernel.
- ``silu_mul_quant``: the gate/up product's scales, SiLU times up, quantisation: one kernel.
- ``quant_rows``: the attention output's quantisation (and the first layer's, after its norm).

At up to 64 token rows every kernel here is launched with programmatic dependent launch (decoding/pdl.py).

A layer is then 4 products, 4 of these kernels and the attention. Every op is a torch custom op (opaque to
torch.compile, captured by CUDA graphs): on CUDA a Triton kernel (fp8_fused_kernels.py), elsewhere its torch
twin, which rounds at the same points (``reference_*``). ``launch_*`` runs the Triton kernel on any device
(a CPU tensor under ``TRITON_INTERPRET=1``: how the tests check the kernels without a GPU). The whole
forward's twin is the unfused ``fp8`` forward (``LeanDecoder(weights="fp8", fused=False)``); the two differ
by one bf16 rounding of each raw product.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from wamdiff2_ros.decoding.fp8 import FP8, Fp8Weight, quantize_rows
from wamdiff2_ros.decoding.lean_layers import queries_and_store, rope_angles
from wamdiff2_ros.decoding.pdl import launch_options

# A raw product (M, N), its (M, 1) and (1, N) scales.
Pending = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _warps(block: int) -> int:
    return min(16, max(4, block // 512))


def fp8_rows(m: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A kernel's FP8 output (m, width) and its (m, 1) scales, to be cast with ``.to(FP8)`` after it.

    Under the interpreter the kernel stores fp32 and torch casts: Triton 3.8's interpreter rounds e4m3
    wrongly where the rounding carries into the exponent (124.3 -> 64, not 128); a GPU converts in hardware.
    """
    dtype = torch.float32 if os.environ.get("TRITON_INTERPRET") == "1" else FP8
    return torch.empty((m, width), dtype=dtype, device=device), torch.empty((m, 1), device=device)


def _scaled(raw: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor) -> torch.Tensor:
    # A raw product with its scales, rounded as the scaled product's output would be.
    return (raw.float() * row_scale * col_scale).to(raw.dtype)


# The twins: torch ops rounding where the kernels round (and where the unfused forward rounds).


def reference_add_norm_quant(x, raw, row_scale, col_scale, weight, eps):
    x = settle(x, (raw, row_scale, col_scale))
    return (x, *quantize_rows(F.rms_norm(x, (x.shape[-1],), weight, eps)))


def reference_silu_mul_quant(raw, row_scale, col_scale):
    gate, up = _scaled(raw, row_scale, col_scale).chunk(2, dim=-1)
    return quantize_rows(F.silu(gate) * up)


def reference_rope_store(raw, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps):
    rows, length, _ = raw.shape
    qkv = _scaled(raw.reshape(rows * length, -1), row_scale, col_scale).view(rows, length, -1)
    return queries_and_store(qkv, qk_norm, cos, sin, keys, values, slots, heads, eps)


# The Triton launches (any device; a CPU tensor needs TRITON_INTERPRET=1).


def launch_rows(x, raw, row_scale, col_scale, weight, eps, add: bool, norm: bool):
    import triton

    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    m, width = x.shape
    block = triton.next_power_of_2(width)
    q, scale = fp8_rows(m, width, x.device)
    x_out = torch.empty_like(x) if add else x
    raw = raw if add else x
    kernels.rows[(m,)](
        x, raw, row_scale if add else scale, col_scale if add else scale, weight if norm else x, x_out, q,
        scale, width, x.stride(0), raw.stride(0), eps, ADD=add, NORM=norm, BLOCK=block,
        num_warps=_warps(block), **launch_options(x.device, m),
    )  # fmt: skip
    return x_out, q.to(FP8), scale


# The H200 sweep (tools/probes/gpu_kernels.py fused_fp8, docs/BENCHMARKS.md), of the kernel before its
# scratch row: chunks of 2,048, 16 warps up to 256 rows (5.2 us at 32), 8 beyond (47 us at the prompt's
# 2,106; 16 warps 50 us). The scratch-row kernel is not yet swept or timed.
SILU_BLOCK = 2048


def launch_silu_mul_quant(raw, row_scale, col_scale, warps: int | None = None, block: int = SILU_BLOCK):
    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    m, width = raw.shape[0], raw.shape[1] // 2
    warps = warps or (16 if m <= 256 else 8)
    q, scale = fp8_rows(m, width, raw.device)
    activations = torch.empty((m, width), dtype=raw.dtype, device=raw.device)  # the kernel's scratch row
    kernels.silu_mul[(m,)](
        raw, row_scale, col_scale, activations, q, scale, width, raw.stride(0), BLOCK=block, num_warps=warps,
        **launch_options(raw.device, m),
    )  # fmt: skip
    return q.to(FP8), scale


# The swap-AB product's launches (token tile, N, K) -> (BLOCK_N, BLOCK_K, warps, stages): the H100 probe's
# fastest where they beat the unit-scaled _scaled_mm (the thirty-ninth session's probe, docs/BENCHMARKS.md:
# q/k/v 4.07 against 4.45 us at 32 rows, out 3.85 against 4.26, gate/up 6.35 against 7.48 and 7.09 against
# 8.14 at 64; down and the 64-row q/k/v and out were level or slower, with the weights in L2. The forty-
# second session's sweep from HBM on the H200, PDL off (probe in git history, e1306a9): gate/up at 32 rows
# 8.86 us with (64, 256, 4, 3) against 9.51 with this table's; not timed in the forward). The forty-fourth
# session's whole-forward probe on the H100 with PDL (`gpu_kernels.py swap_ab_forward`): the 32-row down
# product through this kernel 1.558 ms a forward back to back against 1.600 through cuBLAS (its programs
# prefetch their weights while `silu_mul` runs); gate/up at (64, 256, 4, 3) 1.622, slower: not taken.
SWAP_AB = {
    (32, 4096, 2048): (64, 256, 4, 3),
    (32, 2048, 2048): (64, 256, 4, 3),
    (32, 12288, 2048): (128, 128, 4, 4),
    (32, 2048, 6144): (64, 256, 4, 3),
    (64, 12288, 2048): (128, 128, 4, 4),
}
# On since their run in the whole 2b forward on the H100: 27 us less kernel time (-1.8 % busy), and `bench
# decode`'s fp8 row 1,798 tokens/s against 1,686 on one card (docs/BENCHMARKS.md, fortieth session).
# False: _scaled_mm.
SWAP_AB_ON_CUDA = True


def swap_launch(m: int, n: int, k: int) -> tuple[int, int, int, int] | None:
    """The swap-AB launch for an (m, k) x (n, k) product, or None where ``_scaled_mm`` is the faster."""
    return SWAP_AB.get(_small_shape(m, n, k))


SMALL_ROWS = 128  # the launch tables' largest tile of rows


def _small_shape(m: int, n: int, k: int) -> tuple[int, int, int] | None:
    # (m's next power of two, n, k): a launch table's key, None beyond the tables' largest tile of rows. The
    # test comes first: on the prompt forward, compiled for every length, m is symbolic, and rounding it
    # would guard the graph on m's value (a recompile for every prompt length); `m > SMALL_ROWS` guards a
    # range.
    if m > SMALL_ROWS:
        return None
    return 1 << max(m - 1, 1).bit_length(), n, k


def launch_swap_product(x8, data, launch: tuple[int, int, int, int], dtype: torch.dtype) -> torch.Tensor:
    """x8 (m, k) times data (n, k) transposed, unscaled, in ``dtype`` (m, n)."""
    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    (m, k), n = x8.shape, data.shape[0]
    block_n, block_k, warps, stages = launch
    if n % block_n or k % block_k or not x8.is_contiguous() or not data.is_contiguous():
        raise ValueError(f"a swap-AB product of ({m}, {k}) x ({n}, {k}) cannot take the launch {launch}")
    out = torch.empty((m, n), dtype=dtype, device=x8.device)
    tokens = max(16, 1 << max(m - 1, 1).bit_length())
    kernels.swap_product[(n // block_n,)](
        data, x8, out, m, n, k, TOKENS=tokens, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        num_stages=stages, **launch_options(x8.device, m),
    )  # fmt: skip
    return out


def rope_group(tokens: int, heads: int, kv_heads: int) -> int:
    """Heads per program of the rotary kernel: one at decode sizes (many programs for few tokens), else the
    most, up to 8, that divide both head counts (a program's heads are then all of one kind)."""
    if tokens <= 256:
        return 1
    group = 8
    while heads % group or kv_heads % group:
        group //= 2
    return group


def launch_rope_store(
    raw, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps, group: int | None = None
):
    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    rows, length, width = raw.shape
    qk_heads, dim = qk_norm.shape
    kv_heads = qk_heads - heads
    group = group or rope_group(rows * length, heads, kv_heads)
    if heads % group or kv_heads % group:
        raise ValueError(f"{group} heads a program do not divide {heads} query and {kv_heads} KV heads")
    raw = raw.reshape(rows * length, width)
    q = torch.empty((rows, length, heads, dim), dtype=keys.dtype, device=raw.device)
    kernels.rope_store[(rows * length, (qk_heads + kv_heads) // group)](
        raw, row_scale, col_scale, qk_norm, cos, sin, slots, q, keys, values, length, raw.stride(0),
        cos.stride(0), keys.stride(0), keys.stride(1), values.stride(0), values.stride(1), eps, HEADS=heads,
        KV_HEADS=kv_heads, D=dim, GROUP=group, num_warps=1 if group == 1 else 4,
        **launch_options(raw.device, rows * length),
    )  # fmt: skip
    return q


# The custom ops the forward calls: Triton on CUDA, the twin elsewhere.


@torch.library.custom_op("wamdiff2::fp8_add_norm_quant", mutates_args=())
def add_norm_quant(
    x: torch.Tensor,
    raw: torch.Tensor,
    row_scale: torch.Tensor,
    col_scale: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` (M, H) plus the raw product ``raw`` (M, H) times its scales, then RMSNorm with ``weight``, in
    FP8: (the new x, its normed rows in e4m3 (M, H), their (M, 1) fp32 scales)."""
    if x.device.type != "cuda":
        return reference_add_norm_quant(x, raw, row_scale, col_scale, weight, eps)
    return launch_rows(x, raw, row_scale, col_scale, weight, eps, add=True, norm=True)


@add_norm_quant.register_fake
def _(x, raw, row_scale, col_scale, weight, eps):
    return (
        torch.empty_like(x),
        x.new_empty(x.shape, dtype=FP8),
        x.new_empty((x.shape[0], 1), dtype=torch.float32),
    )


@torch.library.custom_op("wamdiff2::fp8_quant_rows", mutates_args=())
def quant_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (M, K) in e4m3 with one fp32 scale per row (``fp8.quantize_rows``, in one kernel)."""
    if x.device.type != "cuda":
        return quantize_rows(x)
    _, q, scale = launch_rows(x, x, x, x, x, 0.0, add=False, norm=False)
    return q, scale


@quant_rows.register_fake
def _(x):
    return x.new_empty(x.shape, dtype=FP8), x.new_empty((x.shape[0], 1), dtype=torch.float32)


@torch.library.custom_op("wamdiff2::fp8_silu_mul_quant", mutates_args=())
def silu_mul_quant(
    raw: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The raw gate/up product (M, 2 I) times its scales -> SiLU(gate) * up (M, I) in e4m3, (M, 1) scales."""
    if raw.device.type != "cuda":
        return reference_silu_mul_quant(raw, row_scale, col_scale)
    return launch_silu_mul_quant(raw, row_scale, col_scale)


@silu_mul_quant.register_fake
def _(raw, row_scale, col_scale):
    shape = (raw.shape[0], raw.shape[1] // 2)
    return raw.new_empty(shape, dtype=FP8), raw.new_empty((raw.shape[0], 1), dtype=torch.float32)


@torch.library.custom_op("wamdiff2::fp8_rope_store", mutates_args=("keys", "values"))
def rope_store(
    raw: torch.Tensor,
    row_scale: torch.Tensor,
    col_scale: torch.Tensor,
    qk_norm: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    heads: int,
    eps: float,
) -> torch.Tensor:
    """The raw q/k/v product (K, n, (Hq + 2 Hkv) D) times its scales -> queries (K, n, Hq, D); k and v go
    to ``keys``/``values`` (K, slots, Hkv, D) at ``slots`` (n,) (``lean_layers.queries_and_store``)."""
    if raw.device.type != "cuda":
        queries = reference_rope_store(
            raw, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps
        )
        return queries.contiguous()  # a custom op's output has the strides of its fake's
    return launch_rope_store(raw, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps)


@rope_store.register_fake
def _(raw, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps):
    return keys.new_empty((raw.shape[0], raw.shape[1], heads, qk_norm.shape[1]))


def _unit_scaled(x8: torch.Tensor, data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The raw product off CUDA: the twin of the swap-AB kernels (``product`` without its weight's scales).
    one = torch.ones((), device=x8.device)
    return torch._scaled_mm(x8, data.t(), scale_a=one, scale_b=one, out_dtype=dtype)


# The layer on these ops (the state between two attention calls is the hidden states, the MLP's down
# product still to be added by the next norm).


@torch.library.custom_op("wamdiff2::fp8_swap_product", mutates_args=())
def swap_product(
    x8: torch.Tensor, data: torch.Tensor, block_n: int, block_k: int, warps: int, stages: int
) -> torch.Tensor:
    """``product`` in bf16 through the swap-AB kernel (CUDA) or ``_scaled_mm`` (its twin elsewhere)."""
    if x8.device.type == "cuda":
        return launch_swap_product(x8, data, (block_n, block_k, warps, stages), torch.bfloat16)
    return _unit_scaled(x8, data, torch.bfloat16)


@swap_product.register_fake
def _(x8, data, block_n, block_k, warps, stages):
    return x8.new_empty((x8.shape[0], data.shape[0]), dtype=torch.bfloat16)


def product(x8: torch.Tensor, weight: Fp8Weight, dtype: torch.dtype) -> torch.Tensor:
    """FP8 rows times an FP8 weight, unscaled, into ``dtype`` (the caller's kernel applies both scales):
    ``_scaled_mm``, or the swap-AB kernel where it is the faster (``SWAP_AB``, with ``SWAP_AB_ON_CUDA``)."""
    if SWAP_AB_ON_CUDA and x8.is_cuda and dtype == torch.bfloat16:
        launch = swap_launch(x8.shape[0], *weight.data.shape)
        if launch is not None:
            return swap_product(x8, weight.data, *launch)
    return torch._scaled_mm(x8, weight.data.t(), scale_a=weight.one, scale_b=weight.one, out_dtype=dtype)


def attention_input(x, pending, input_norm, qkv, qk_norm, cos, sin, keys, values, slots, heads, eps):
    """``lean_layers.attention_input`` on FP8 weights, the pending down product (or None) added first ->
    (hidden states with it added (K, n, H), queries (K, n, Hq, D))."""
    rows, length, hidden = x.shape
    flat = x.reshape(rows * length, hidden)
    if pending is None:
        h8, h_scale = quant_rows(F.rms_norm(flat, (hidden,), input_norm, eps))
    else:
        flat, h8, h_scale = add_norm_quant(flat, *pending, input_norm, eps)
    raw = product(h8, qkv, x.dtype).view(rows, length, -1)
    q = rope_store(raw, h_scale, qkv.scale, qk_norm, cos, sin, keys, values, slots, heads, eps)
    return flat.view(rows, length, hidden), q


def layer_output(x, attended, out, post_norm, gate_up, down, eps) -> tuple[torch.Tensor, Pending]:
    """``lean_layers.layer_output`` on FP8 weights -> (hidden states after attention, the MLP's pending
    down product). ``attended``: the attention output (K, n, Hq D), or already quantised by the attention
    kernel (``SplitKeysAttention.attend_quantized``: e4m3 (K n, Hq D) and its row scales)."""
    rows, length, hidden = x.shape
    if isinstance(attended, tuple):
        a8, a_scale = attended
    else:
        a8, a_scale = quant_rows(attended.reshape(rows * length, -1))
    flat, h8, h_scale = add_norm_quant(
        x.reshape(rows * length, hidden),
        product(a8, out, x.dtype),
        a_scale,
        out.scale,
        post_norm,
        eps,
    )
    m8, m_scale = silu_mul_quant(product(h8, gate_up, x.dtype), h_scale, gate_up.scale)
    return flat.view(rows, length, hidden), (product(m8, down, x.dtype), m_scale, down.scale)


def settle(x: torch.Tensor, pending: Pending) -> torch.Tensor:
    """``x`` with the pending product added."""
    raw, row_scale, col_scale = pending
    flat = (x.reshape(raw.shape).float() + _scaled(raw, row_scale, col_scale).float()).to(x.dtype)
    return flat.view(x.shape)


# The pieces of ``LeanDecoder.forward`` and ``prefill`` (their signatures).


def begin(tokens, start, rope_delta, inv_freq, embed, first, keys, values, heads, eps):
    slots = start + torch.arange(tokens.shape[1], device=tokens.device)
    cos, sin = rope_angles(slots + rope_delta, inv_freq, embed.dtype)
    x, q = attention_input(
        F.embedding(tokens, embed), None, *first, cos, sin, keys, values, slots, heads, eps
    )
    return x, q, slots, cos, sin


def between(x, attended, second, first, cos, sin, keys, values, slots, heads, eps):
    x, pending = layer_output(x, attended, *second, eps)
    return attention_input(x, pending, *first, cos, sin, keys, values, slots, heads, eps)


def end(x, attended, second, final_norm, eps):
    x = settle(*layer_output(x, attended, *second, eps))
    return F.rms_norm(x, (x.shape[-1],), final_norm, eps)
