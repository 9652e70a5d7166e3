"""The Triton kernels of decoding/fp8_fused.py (imported when a kernel is launched: CPU machines may lack
Triton). Each rounds where its torch twin in fp8_fused.py rounds."""

import triton
import triton.language as tl


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    # Launched with PDL (decoding/pdl.py): wait until the kernel before this one has finished and its writes
    # are visible, then let the next kernel's programs be scheduled (they wait here in turn).
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_rows(w_ptr, rows, stride, first, size, PDL: tl.constexpr):
    # Launched with PDL, before wait_for_inputs: ask L2 for `size` bytes of each of this program's weight
    # rows from column `first` (e4m3: a byte a column), one bulk prefetch a row. Weights are written by no
    # kernel, so their bytes may come while the kernel before still runs: the products are HBM-bound, the
    # kernels before them (norms, rotary, the attention's merge) are not.
    if PDL:
        tl.inline_asm_elementwise(
            "cp.async.bulk.prefetch.L2.global [$1], $2; // $0",
            "=r,l,r",
            [w_ptr + rows.to(tl.int64) * stride + first, tl.zeros_like(rows) + size],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def rows(
    x_ptr, raw_ptr, row_scale_ptr, col_scale_ptr, weight_ptr, x_out_ptr, q_ptr, scale_ptr,
    width, stride_x, stride_raw, eps,
    ADD: tl.constexpr, NORM: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    # One row: [x += raw * scales (rounded as a product's output), stored], [RMSNorm], FP8 quantisation.
    wait_for_inputs(PDL)
    m = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    dtype = x_ptr.dtype.element_ty
    x = tl.load(x_ptr + m * stride_x + cols, mask=inside, other=0.0).to(tl.float32)
    if ADD:
        raw = tl.load(raw_ptr + m * stride_raw + cols, mask=inside, other=0.0).to(tl.float32)
        column = tl.load(col_scale_ptr + cols, mask=inside, other=0.0)
        delta = (raw * tl.load(row_scale_ptr + m) * column).to(dtype).to(tl.float32)
        x = (x + delta).to(dtype).to(tl.float32)
        tl.store(x_out_ptr + m * width + cols, x.to(dtype), mask=inside)
    if NORM:
        weight = tl.load(weight_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        x = (x * tl.math.rsqrt(tl.sum(x * x, axis=0) / width + eps) * weight).to(dtype).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=0), 448.0), 1e-12)
    q = tl.minimum(tl.maximum(tl.math.div_rn(x, scale), -448.0), 448.0)
    tl.store(q_ptr + m * width + cols, q.to(q_ptr.dtype.element_ty), mask=inside)
    tl.store(scale_ptr + m, scale)


@triton.jit
def activation(raw_ptr, col_scale_ptr, row_scale, m, width, stride_raw, cols, inside):
    # A chunk of one row of the gate/up product: scales, SiLU(gate) * up, each rounded as torch rounds it.
    dtype = raw_ptr.dtype.element_ty
    gate = tl.load(raw_ptr + m * stride_raw + cols, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(raw_ptr + m * stride_raw + width + cols, mask=inside, other=0.0).to(tl.float32)
    gate_scale = tl.load(col_scale_ptr + cols, mask=inside, other=0.0)
    up_scale = tl.load(col_scale_ptr + width + cols, mask=inside, other=0.0)
    gate = (gate * row_scale * gate_scale).to(dtype).to(tl.float32)
    up = (up * row_scale * up_scale).to(dtype).to(tl.float32)
    silu = tl.math.div_rn(gate, 1.0 + tl.exp(-gate)).to(dtype).to(tl.float32)
    return (silu * up).to(dtype).to(tl.float32)


@triton.jit
def silu_mul(
    raw_ptr, row_scale_ptr, col_scale_ptr, act_ptr, q_ptr, scale_ptr, width, stride_raw, BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    # One row in chunks of BLOCK, twice: the activations (rounded as torch rounds them) to a scratch row
    # and their maximum, then the scratch row quantised. Recomputing the activations in the second pass
    # (the previous kernel) made the pass arithmetic-bound: 47 us for the prompt's 2,106 rows on the H200,
    # where the bytes need ~18; one pass over a whole row in registers took 64 us there (and 7.5 us at 32).
    wait_for_inputs(PDL)
    m = tl.program_id(0)
    row_scale = tl.load(row_scale_ptr + m)
    top = tl.zeros((BLOCK,), tl.float32)
    for first in range(0, width, BLOCK):
        cols = first + tl.arange(0, BLOCK)
        inside = cols < width
        x = activation(raw_ptr, col_scale_ptr, row_scale, m, width, stride_raw, cols, inside)
        tl.store(act_ptr + m * width + cols, x.to(act_ptr.dtype.element_ty), mask=inside)
        top = tl.maximum(top, tl.abs(x))
    scale = tl.maximum(tl.math.div_rn(tl.max(top, axis=0), 448.0), 1e-12)
    tl.debug_barrier()  # the scratch row's stores before its loads, whichever thread holds an element
    for first in range(0, width, BLOCK):
        cols = first + tl.arange(0, BLOCK)
        inside = cols < width
        x = tl.load(act_ptr + m * width + cols, mask=inside, other=0.0).to(tl.float32)
        q = tl.minimum(tl.maximum(tl.math.div_rn(x, scale), -448.0), 448.0)
        tl.store(q_ptr + m * width + cols, q.to(q_ptr.dtype.element_ty), mask=inside)
    tl.store(scale_ptr + m, scale)


@triton.jit
def rope_store(
    raw_ptr, row_scale_ptr, col_scale_ptr, norm_ptr, cos_ptr, sin_ptr, slots_ptr, q_ptr, k_ptr, v_ptr,
    length, stride_raw, stride_angle, stride_k_row, stride_k_slot, stride_v_row, stride_v_slot, eps,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, GROUP: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    # GROUP heads of one token, all of one kind (query, key or value: GROUP divides HEADS and KV_HEADS):
    # scaled q/k/v; q and k normed, weighted and rotated (half-split layout); q to the queries, k and v to
    # their cache slot. One head per program at decode sizes; a prompt's 2,106 tokens x 32 heads as single
    # heads were 67 k programs of one warp (42.9 us on the H200, 4x their bytes).
    wait_for_inputs(PDL)
    m, head = tl.program_id(0), tl.program_id(1) * GROUP
    row, token = m // length, m % length
    half: tl.constexpr = D // 2
    heads = head + tl.arange(0, GROUP)[:, None]  # (GROUP, 1)
    dims = tl.arange(0, half)[None, :]  # (1, half)
    dtype = raw_ptr.dtype.element_ty
    base = m * stride_raw + heads * D
    row_scale = tl.load(row_scale_ptr + m)
    first = (
        tl.load(raw_ptr + base + dims).to(tl.float32) * row_scale * tl.load(col_scale_ptr + heads * D + dims)
    )
    second = (
        tl.load(raw_ptr + base + half + dims).to(tl.float32)
        * row_scale
        * tl.load(col_scale_ptr + heads * D + half + dims)
    )
    first, second = first.to(dtype).to(tl.float32), second.to(dtype).to(tl.float32)
    slot = tl.load(slots_ptr + token)
    if head < HEADS + KV_HEADS:
        squares = tl.sum(first * first, axis=1) + tl.sum(second * second, axis=1)
        inverse = tl.math.rsqrt(squares / D + eps)[:, None]
        first = (first * inverse).to(dtype).to(tl.float32)
        second = (second * inverse).to(dtype).to(tl.float32)
        first = (first * tl.load(norm_ptr + heads * D + dims).to(tl.float32)).to(dtype).to(tl.float32)
        second_weight = tl.load(norm_ptr + heads * D + half + dims).to(tl.float32)
        second = (second * second_weight).to(dtype).to(tl.float32)
        angle = token * stride_angle
        cos_first = tl.load(cos_ptr + angle + dims).to(tl.float32)
        cos_second = tl.load(cos_ptr + angle + half + dims).to(tl.float32)
        sin_first = tl.load(sin_ptr + angle + dims).to(tl.float32)
        sin_second = tl.load(sin_ptr + angle + half + dims).to(tl.float32)
        rotated_first = (first * cos_first).to(dtype).to(tl.float32) + (-second * sin_first).to(dtype).to(
            tl.float32
        )
        rotated_second = (second * cos_second).to(dtype).to(tl.float32) + (first * sin_second).to(dtype).to(
            tl.float32
        )
        if head < HEADS:
            out = q_ptr + (m * HEADS + heads) * D
        else:
            out = k_ptr + row * stride_k_row + slot * stride_k_slot + (heads - HEADS) * D
        tl.store(out + dims, rotated_first.to(dtype))
        tl.store(out + half + dims, rotated_second.to(dtype))
    else:
        out = v_ptr + row * stride_v_row + slot * stride_v_slot + (heads - HEADS - KV_HEADS) * D
        tl.store(out + dims, first.to(dtype))
        tl.store(out + half + dims, second.to(dtype))


@triton.jit
def swap_product(
    w_ptr, x_ptr, out_ptr, m, n, k, TOKENS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    # out (m, n) = x8 (m, k) times w8 (n, k) transposed, unscaled: the weight's rows are the MMA's M side
    # (BLOCK_N, what Hopper's wgmma needs) and the m <= TOKENS rows its N side.
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    prefetch_rows(w_ptr, rows, k, 0, k, PDL)
    wait_for_inputs(PDL)
    tokens = tl.arange(0, TOKENS)
    depth = tl.arange(0, BLOCK_K)
    inside = tokens < m
    acc = tl.zeros((BLOCK_N, TOKENS), tl.float32)
    for first in range(0, k, BLOCK_K):
        w = tl.load(w_ptr + rows[:, None] * k + (first + depth)[None, :])
        x = tl.load(x_ptr + tokens[:, None] * k + (first + depth)[None, :], mask=inside[:, None], other=0.0)
        acc = tl.dot(w, tl.trans(x), acc)
    out = out_ptr + tokens[None, :] * n + rows[:, None]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=inside[None, :])
