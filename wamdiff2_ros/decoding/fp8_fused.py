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
- ``qkv_rope_store``: at 32-64 rows the q/k/v product and ``rope_store`` in one swap-AB kernel, a program
  a head and tile of tokens (``QKV_EPILOGUE``; off on CUDA: one program a head was slower in the forward,
  the tiles are not yet timed).
- ``fused_mlp``: at 32-128 rows the MLP in two swap-AB kernels, gate/up with ``silu_mul``'s activation in
  its epilogue, then the down product quantising its input on the fly, its split sums added by the next
  ``add_norm_quant`` (``MLP_EPILOGUE``; off on CUDA until timed in the forward).

With ``pdl.PDL_ON_CUDA`` every kernel here is launched with programmatic dependent launch (decoding/pdl.py).

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

Pending = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor
]  # a raw product (M, N), its (M, 1) and (1, N) scales


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
    splits = raw.shape[0] if raw.dim() == 3 else 1  # fused_mlp's partial sums of the down product
    kernels.rows[(m,)](
        x, raw, row_scale if add else scale, col_scale if add else scale, weight if norm else x, x_out, q,
        scale, width, x.stride(0), raw.stride(-2), raw.stride(0) if splits > 1 else 0, eps, ADD=add,
        NORM=norm, BLOCK=block, SPLITS=splits, num_warps=_warps(block), **launch_options(x.device),
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
    activations = torch.empty((m, width), dtype=raw.dtype, device=raw.device)  # the kernel's scratch
    kernels.silu_mul[(m,)](
        raw, row_scale, col_scale, activations, q, scale, width, raw.stride(0), BLOCK=block, num_warps=warps,
        **launch_options(raw.device),
    )  # fmt: skip
    return q.to(FP8), scale


# The swap-AB product's launches (token tile, N, K) -> (BLOCK_N, BLOCK_K, warps, stages): the H100 probe's
# fastest where they beat the unit-scaled _scaled_mm (tools/probes/gpu_kernels.py swap_ab, docs/BENCHMARKS.md:
# q/k/v 4.07 against 4.45 us at 32 rows, out 3.85 against 4.26, gate/up 6.35 against 7.48 and 7.09 against
# 8.14 at 64; down and the 64-row q/k/v and out were level or slower).
SWAP_AB = {
    (32, 4096, 2048): (64, 256, 4, 3),
    (32, 2048, 2048): (64, 256, 4, 3),
    (32, 12288, 2048): (128, 128, 4, 4),
    (64, 12288, 2048): (128, 128, 4, 4),
}
# On since their run in the whole 2b forward on the H100: 27 us less kernel time (-1.8 % busy), and `bench
# decode`'s fp8 row 1,798 tokens/s against 1,686 on one card (docs/BENCHMARKS.md, fortieth session).
# False: _scaled_mm.
SWAP_AB_ON_CUDA = True


def swap_launch(m: int, n: int, k: int) -> tuple[int, int, int, int] | None:
    """The swap-AB launch for an (m, k) x (n, k) product, or None where ``_scaled_mm`` is the faster."""
    tile = 1 << max(m - 1, 1).bit_length()  # the next power of two
    return SWAP_AB.get((tile, n, k))


def launch_swap_product(x8, data, launch: tuple[int, int, int, int], dtype: torch.dtype) -> torch.Tensor:
    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    (m, k), n = x8.shape, data.shape[0]
    block_n, block_k, warps, stages = launch
    if n % block_n or k % block_k or not x8.is_contiguous() or not data.is_contiguous():
        raise ValueError(f"a swap-AB product of ({m}, {k}) x ({n}, {k}) cannot take the launch {launch}")
    out = torch.empty((m, n), dtype=dtype, device=x8.device)
    tokens = max(16, 1 << max(m - 1, 1).bit_length())
    kernels.swap_product[(n // block_n,)](
        data, x8, out, m, n, k, TOKENS=tokens, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        num_stages=stages, **launch_options(x8.device),
    )  # fmt: skip
    return out


# The MLP in two kernels at 32-64 rows (token tile, gate/up N, K, down N) -> (gate/up's BLOCK_N, BLOCK_K,
# warps, stages; down's BLOCK_N, BLOCK_K, splits, warps, stages). Not yet timed: off on CUDA until the 2b
# forward's kernel time falls with it (docs/BENCHMARKS.md "Next on a GPU"). The launches are first guesses
# (gate/up as the H100 probe's 7.96-us kernel; the down product at 8 warps: at 4 it spills registers for
# sm_90a, test_kernels_compile.py).
MLP_EPILOGUE = {
    (32, 12288, 2048, 2048): (64, 128, 4, 4, 64, 128, 4, 8, 3),
    (64, 12288, 2048, 2048): (64, 128, 4, 4, 64, 128, 4, 8, 3),
    (128, 12288, 2048, 2048): (64, 128, 8, 3, 64, 64, 4, 8, 3),  # K = 4 rows: no spill at these
}
MLP_EPILOGUE_ON_CUDA = False


def mlp_launch(m: int, gate_up: tuple[int, int], down: tuple[int, int]) -> list[int] | None:
    """The two-kernel MLP's launch for m rows, or None (the gate/up product, silu_mul_quant, the down)."""
    launch = MLP_EPILOGUE.get((1 << max(m - 1, 1).bit_length(), *gate_up, down[0]))
    return list(launch) if launch is not None else None


def launch_fused_mlp(
    h8, h_scale, gate_up, gate_up_scale, down, dtype, launch
) -> tuple[torch.Tensor, torch.Tensor]:
    """gate_up_silu then quant_down (any device; CPU tensors under the interpreter): the down product's
    fp32 partial sums (splits, m, N) and the activations' (m, 1) FP8 scales."""
    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    (m, k), width, n = h8.shape, down.shape[1], down.shape[0]
    block_n, block_k, warps, stages, down_n, down_k, splits, down_warps, down_stages = launch
    shapes_fit = (
        width % block_n == 0 and k % block_k == 0 and n % down_n == 0 and width % (splits * down_k) == 0
    )
    contiguous = h8.is_contiguous() and gate_up.is_contiguous() and down.is_contiguous()
    if not shapes_fit or gate_up.shape != (2 * width, k) or not contiguous:
        raise ValueError(f"an MLP of {tuple(gate_up.shape)} and {tuple(down.shape)} cannot take {launch}")
    tokens = max(16, 1 << max(m - 1, 1).bit_length())
    programs = width // block_n
    act = torch.empty((m, width), dtype=dtype, device=h8.device)
    top = torch.empty((programs, m), device=h8.device)
    kernels.gate_up_silu[(programs,)](
        gate_up, h8, h_scale, gate_up_scale, act, top, m, k, width, TOKENS=tokens, BLOCK_N=block_n,
        BLOCK_K=block_k, num_warps=warps, num_stages=stages, **launch_options(h8.device),
    )  # fmt: skip
    partials = torch.empty((splits, m, n), device=h8.device)
    scale = torch.empty((m, 1), device=h8.device)
    kernels.quant_down[(n // down_n, splits)](
        down, act, top, partials, scale, m, n, width, programs, TOKENS=tokens,
        PROGRAMS=1 << max(programs - 1, 1).bit_length(), BLOCK_N=down_n, BLOCK_K=down_k,
        EXACT_CAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=down_warps, num_stages=down_stages,
        **launch_options(h8.device),
    )  # fmt: skip
    return partials, scale


# The q/k/v product with rope_store in its epilogue (a program per head and tile of tokens, swap-AB):
# (token tile of the rows, N, K) -> (tokens a program, BLOCK_K, warps, stages). Off on CUDA: timed in the 2b
# forward on the H100 with all 32 rows in one program a head it took 10.9 us a layer against 6.0 + 2.1 for
# the product then rope_store (32 programs are too few for the product; docs/BENCHMARKS.md, fortieth
# session). Tiles of 16 tokens (64 programs at 32 rows; a head's weights read twice, the second time
# mostly from L2) are written, not yet timed.
QKV_EPILOGUE = {(32, 4096, 2048): (16, 128, 4, 3), (64, 4096, 2048): (16, 128, 4, 3)}
QKV_EPILOGUE_ON_CUDA = False


def launch_qkv_rope_store(
    x8, data, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps, rows, launch
):
    from wamdiff2_ros.decoding import fp8_fused_kernels as kernels

    m, k = x8.shape
    length = m // rows
    qk_heads, dim = qk_norm.shape
    kv_heads = qk_heads - heads
    tokens, block_k, warps, stages = launch
    if k % block_k or not x8.is_contiguous() or not data.is_contiguous() or m % rows:
        raise ValueError(f"q/k/v of ({m}, {k}) x {tuple(data.shape)} cannot take the launch {launch}")
    q = torch.empty((rows, length, heads, dim), dtype=keys.dtype, device=x8.device)
    kernels.qkv_rope_store[(qk_heads + kv_heads, -(-m // tokens))](
        data, x8, row_scale, col_scale, qk_norm, cos, sin, slots, q, keys, values, m, k, length,
        cos.stride(0), keys.stride(0), keys.stride(1), values.stride(0), values.stride(1), eps, HEADS=heads,
        KV_HEADS=kv_heads, D=dim, TOKENS=tokens, BLOCK_K=block_k, num_warps=warps, num_stages=stages,
        **launch_options(x8.device),
    )  # fmt: skip
    return q


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
    q = torch.empty((rows, length, heads, dim), dtype=raw.dtype, device=raw.device)
    kernels.rope_store[(rows * length, (qk_heads + kv_heads) // group)](
        raw, row_scale, col_scale, qk_norm, cos, sin, slots, q, keys, values, length, raw.stride(0),
        cos.stride(0), keys.stride(0), keys.stride(1), values.stride(0), values.stride(1), eps,
        HEADS=heads, KV_HEADS=kv_heads, D=dim, GROUP=group, num_warps=1 if group == 1 else 4,
        **launch_options(raw.device),
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
    return raw.new_empty((raw.shape[0], raw.shape[1], heads, qk_norm.shape[1]))


def _unit_scaled(x8: torch.Tensor, data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The raw product off CUDA: the twin of the swap-AB kernels (``product`` without its weight's scales).
    one = torch.ones((), device=x8.device)
    return torch._scaled_mm(x8, data.t(), scale_a=one, scale_b=one, out_dtype=dtype)


@torch.library.custom_op("wamdiff2::fp8_qkv_rope_store", mutates_args=("keys", "values"))
def qkv_rope_store(
    x8: torch.Tensor,
    data: torch.Tensor,
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
    rows: int,
    tokens: int,
    block_k: int,
    warps: int,
    stages: int,
) -> torch.Tensor:
    """``rope_store`` of the q/k/v product of ``x8`` (rows x n, K) in one kernel on CUDA: queries (rows, n,
    Hq, D), k and v stored; elsewhere its twin, the product then ``rope_store``'s."""
    if x8.device.type != "cuda":
        raw = _unit_scaled(x8, data, keys.dtype)
        raw = raw.view(rows, x8.shape[0] // rows, -1)
        queries = reference_rope_store(
            raw, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps
        )
        return queries.contiguous()
    launch = (tokens, block_k, warps, stages)
    return launch_qkv_rope_store(
        x8, data, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps, rows, launch
    )


@qkv_rope_store.register_fake
def _(
    x8, data, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, heads, eps, rows, tokens, block_k,
    warps, stages,
):  # fmt: skip
    return keys.new_empty((rows, x8.shape[0] // rows, heads, qk_norm.shape[1]))


@torch.library.custom_op("wamdiff2::fp8_fused_mlp", mutates_args=())
def fused_mlp(
    h8: torch.Tensor,
    h_scale: torch.Tensor,
    gate_up: torch.Tensor,
    gate_up_scale: torch.Tensor,
    down: torch.Tensor,
    dtype: torch.dtype,
    launch: list[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The MLP of the normed FP8 rows ``h8`` (m, H): the down product's fp32 partial sums over ``launch``'s
    splits of its depth (splits, m, N; their sum is the raw down product) and its (m, 1) input scales.
    On CUDA two kernels; elsewhere the twin: the gate/up product, ``silu_mul_quant``'s, the split down
    product."""
    if h8.device.type == "cuda":
        return launch_fused_mlp(h8, h_scale, gate_up, gate_up_scale, down, dtype, launch)
    if down.shape[1] % launch[6]:
        raise ValueError(f"{launch[6]} splits do not divide the down product's depth {down.shape[1]}")
    m8, m_scale = reference_silu_mul_quant(_unit_scaled(h8, gate_up, dtype), h_scale, gate_up_scale)
    depths = m8.float().chunk(launch[6], dim=1)
    weights = down.float().chunk(launch[6], dim=1)
    return torch.stack([part @ weight.T for part, weight in zip(depths, weights, strict=True)]), m_scale


@fused_mlp.register_fake
def _(h8, h_scale, gate_up, gate_up_scale, down, dtype, launch):
    partials = h8.new_empty((launch[6], h8.shape[0], down.shape[0]), dtype=torch.float32)
    return partials, h8.new_empty((h8.shape[0], 1), dtype=torch.float32)


def qkv_launch(m: int, n: int, k: int) -> tuple[int, int, int, int] | None:
    """The fused q/k/v launch for m rows of an (n, k) q/k/v weight, or None (the product, then rope_store)."""
    return QKV_EPILOGUE.get((1 << max(m - 1, 1).bit_length(), n, k))


# The layer on these ops (the state between two attention calls is the hidden states, the MLP's down
# product still to be added by the next norm).


@torch.library.custom_op("wamdiff2::fp8_swap_product", mutates_args=())
def swap_product(
    x8: torch.Tensor, data: torch.Tensor, block_n: int, block_k: int, warps: int, stages: int
) -> torch.Tensor:
    """``product`` in bf16 through the swap-AB kernel (CUDA) or ``_scaled_mm`` (its twin elsewhere)."""
    if x8.device.type != "cuda":
        return _unit_scaled(x8, data, torch.bfloat16)
    return launch_swap_product(x8, data, (block_n, block_k, warps, stages), torch.bfloat16)


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
    launch = qkv_launch(rows * length, *qkv.data.shape) if QKV_EPILOGUE_ON_CUDA and h8.is_cuda else None
    if launch is not None:
        q = qkv_rope_store(
            h8,
            qkv.data,
            h_scale,
            qkv.scale,
            qk_norm,
            cos,
            sin,
            keys,
            values,
            slots,
            heads,
            eps,
            rows,
            *launch,
        )
        return flat.view(rows, length, hidden), q
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
        x.reshape(rows * length, hidden), product(a8, out, x.dtype), a_scale, out.scale, post_norm, eps
    )
    # the switch first: the launch's lookup of a symbolic row count would guard the compiled prompt
    # forward (dynamic shapes) on its value, a recompile for every prompt length
    launch = (
        mlp_launch(h8.shape[0], gate_up.data.shape, down.data.shape)
        if MLP_EPILOGUE_ON_CUDA and h8.is_cuda
        else None
    )
    if launch is not None:
        partials, m_scale = fused_mlp(h8, h_scale, gate_up.data, gate_up.scale, down.data, x.dtype, launch)
        return flat.view(rows, length, hidden), (partials, m_scale, down.scale)
    m8, m_scale = silu_mul_quant(product(h8, gate_up, x.dtype), h_scale, gate_up.scale)
    return flat.view(rows, length, hidden), (product(m8, down, x.dtype), m_scale, down.scale)


def settle(x: torch.Tensor, pending: Pending) -> torch.Tensor:
    """``x`` with the pending product added (a raw product, or ``fused_mlp``'s partial sums of one)."""
    raw, row_scale, col_scale = pending
    if raw.dim() == 3:
        raw = raw.sum(0).to(x.dtype)
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
