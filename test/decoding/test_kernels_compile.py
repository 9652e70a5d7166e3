"""The Triton kernels compile for the H200 (sm_90a) without a GPU, and spill no registers.

The interpreter tests check what the kernels compute; this checks what only a compiler sees: Triton's
lowering for a real NVIDIA target, then ptxas' register allocation (the bundled ``ptxas -v``). Triton here
is requirements/dev.txt's, newer than the device image's, so this is a guard, not the GPU tests.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

H200 = GPUTarget("cuda", 90, 32)
# What Triton's JIT specialises a launch on (its arguments' values): pointers 16-byte aligned (torch's
# allocations) and these integer arguments, multiples of 16 wherever the kernels are launched. Without them
# the loads are not vectorised (the swap-AB product loaded its tiles a byte at a time and spilled ~1 KB).
MULTIPLES_OF_16 = {
    "k", "n", "width", "stride_x", "stride_raw", "stride_angle", "stride_k_row",
    "stride_k_slot", "stride_v_row", "stride_v_slot",
}  # fmt: skip
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"

ROPE = {
    "raw_ptr": "*bf16", "row_scale_ptr": "*fp32", "col_scale_ptr": "*fp32", "norm_ptr": "*bf16",
    "cos_ptr": "*bf16", "sin_ptr": "*bf16", "slots_ptr": "*i64", "q_ptr": "*bf16", "k_ptr": "*bf16",
    "v_ptr": "*bf16", "length": "i32", "stride_raw": "i32", "stride_angle": "i32",
    "stride_k_row": "i32", "stride_k_slot": "i32", "stride_v_row": "i32", "stride_v_slot": "i32",
    "eps": "fp32",
}  # fmt: skip
SILU = {
    "raw_ptr": "*bf16", "row_scale_ptr": "*fp32", "col_scale_ptr": "*fp32", "act_ptr": "*bf16",
    "q_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "width": "i32", "stride_raw": "i32",
}  # fmt: skip
ROWS = {
    "x_ptr": "*bf16", "raw_ptr": "*bf16", "row_scale_ptr": "*fp32", "col_scale_ptr": "*fp32",
    "weight_ptr": "*bf16", "x_out_ptr": "*bf16", "q_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "width": "i32",
    "stride_x": "i32", "stride_raw": "i32", "eps": "fp32",
}  # fmt: skip
SWAP_PRODUCT = {
    "w_ptr": "*fp8e4nv",
    "x_ptr": "*fp8e4nv",
    "out_ptr": "*bf16",
    "m": "i32",
    "n": "i32",
    "k": "i32",
}
PARTIAL = {
    "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "bounds_ptr": "*i64", "out_ptr": "*fp32",
    "lse_ptr": "*fp32", "n": "i32", "tiles_per_row": "i32", "max_len": "i32", "scale": "fp32",
}  # fmt: skip
MERGE = {
    "parts_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": "*bf16", "n": "i32", "tiles_per_row": "i32",
    "chunks": "i32",
}  # fmt: skip
MERGE_QUANT = {
    "parts_ptr": "*fp32", "lse_ptr": "*fp32", "q8_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "n": "i32",
    "tiles_per_row": "i32", "chunks": "i32",
}  # fmt: skip
GRAMMAR = {
    "next_ptr": "*i32", "live_ptr": "*i1", "done_ptr": "*i1", "distance_ptr": "*i64", "cols_ptr": "*i64",
    "masked_ptr": "*i1", "states_ptr": "*i64", "limit_ptr": "*i64", "after_ptr": "*i64", "sets_ptr": "*i8",
    "current_ptr": "*i8", "allowed_ptr": "*i8", "feasible_ptr": "*i8", "size": "i32", "num_states": "i32",
    "num_columns": "i32",
}  # fmt: skip


def _kernels():
    import triton.language as tl

    from wamdiff2_ros.decoding import device_grammar_kernels, fp8_fused, fp8_fused_kernels
    from wamdiff2_ros.decoding.attention.split_keys import _kernels as split_keys
    from wamdiff2_ros.decoding.device_grammar import kernel_warps

    partial, merge, merge_quant = split_keys()
    rope_store = fp8_fused_kernels.rope_store
    two_b = {"HEADS": 16, "KV_HEADS": 8, "D": 128}
    heads = {"QUERY_HEADS": 16, "KV_HEADS": 8, "D": 128, "QUERIES": 32}
    return {  # name: (kernel, signature, constexprs, warps as launched, spill bytes tolerated)
        "rows: add + norm + quant": (
            fp8_fused_kernels.rows,
            ROWS,
            {"ADD": True, "NORM": True, "BLOCK": 2048},
            4,
            0,
        ),
        **{
            f"swap_product {n}x{k}, {warps} warps": (
                fp8_fused_kernels.swap_product,
                SWAP_PRODUCT,
                {"TOKENS": 32, "BLOCK_N": n, "BLOCK_K": k},
                warps,
                0,
            )
            for n, k, warps, _ in set(fp8_fused.SWAP_AB.values())
        },
        "swap_product 64x256, launched with PDL": (
            fp8_fused_kernels.swap_product,
            SWAP_PRODUCT,
            {"TOKENS": 32, "BLOCK_N": 64, "BLOCK_K": 256, "PDL": True},
            4,
            0,
        ),
        "split-keys partial": (
            partial,
            PARTIAL,
            {**heads, "BLOCK": 32, "KEYS": 32, "CHUNK": 256, "INTERPRETED": False},
            4,
            0,
        ),
        "split-keys partial, launched with PDL": (
            partial,
            PARTIAL,
            {**heads, "BLOCK": 32, "KEYS": 32, "CHUNK": 256, "INTERPRETED": False, "PDL": True},
            4,
            0,
        ),
        "split-keys merge": (merge, MERGE, {**heads, "CHUNKS": 16}, 4, 0),
        "split-keys merge, launched with PDL": (merge, MERGE, {**heads, "CHUNKS": 16, "PDL": True}, 4, 0),
        "rope_store, a head a program": (rope_store, ROPE, {**two_b, "GROUP": 1}, 1, 0),
        "rope_store, 8 heads a program": (rope_store, ROPE, {**two_b, "GROUP": 8}, 4, 0),
        "silu_mul, 16 warps": (fp8_fused_kernels.silu_mul, SILU, {"BLOCK": 2048}, 16, 0),
        "silu_mul, 8 warps": (fp8_fused_kernels.silu_mul, SILU, {"BLOCK": 2048}, 8, 0),
        "merge_quant": (merge_quant, MERGE_QUANT, {**heads, "CHUNKS": 16, "OUT_DTYPE": tl.bfloat16}, 8, 0),
        **{
            f"grammar block_sets {tile}, allowed={allowed}": (
                device_grammar_kernels.block_sets,
                GRAMMAR,
                {"S": states, "G": columns, "ALLOWED": allowed},
                kernel_warps(states, columns),
                # the detection grammar's tile spills a little (``kernel_warps``); it runs every few plans
                256 if states * columns > 4096 else 0,
            )
            for tile, (states, columns) in {
                "planning 256x16": (256, 16),
                "detection 128x128": (128, 128),
            }.items()
            for allowed in (True, False)
        },
    }


@pytest.mark.parametrize("name", list(_kernels()))
def test_the_kernel_compiles_for_the_h200_without_spilling(name, tmp_path):
    kernel, signature, constexprs, warps, tolerated = _kernels()[name]
    if "PDL" in kernel.arg_names:  # launched without PDL unless the entry says so (decoding/pdl.py)
        constexprs = {"PDL": False, **constexprs}
    aligned = {
        (kernel.arg_names.index(name),): [["tt.divisibility", 16]]
        for name, kind in signature.items()
        if kind.startswith("*") or name in MULTIPLES_OF_16
    }
    source = ASTSource(fn=kernel, signature={**signature, **dict.fromkeys(constexprs, "constexpr")},
                       constexprs=constexprs, attrs=aligned)  # fmt: skip
    compiled = triton.compile(source, target=H200, options={"num_warps": warps})
    if not PTXAS.exists():
        pytest.skip("Triton's bundled ptxas is absent")
    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(compiled.asm["ptx"])
    done = subprocess.run(
        [str(PTXAS), "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if constexprs.get("PDL"):
        assert "griddepcontrol.wait" in compiled.asm["ptx"]
        if "w_ptr" in signature or "k_ptr" in signature:  # the weights' or the prompt's prefetch
            assert "cp.async.bulk.prefetch.L2.global" in compiled.asm["ptx"]
    spilled = int(re.search(r"(\d+) bytes spill stores", done.stderr).group(1))
    assert spilled <= tolerated, done.stderr
