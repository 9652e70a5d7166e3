"""Kernel probes behind the fast path's choices (GPU only; docs/log/benchmarks-gpu-decoding-2026-11-30.md).

gemm: the 2b text decoder's matrix products at M = 32..256 rows (cuBLAS via F.linear, FP8 via _scaled_mm,
Inductor max-autotune at M = 32). fp8: the same at M = 32..256 and 2,106 (the 1080p prompt) through
``decoding.fp8``: row-wise-scaled _scaled_mm alone, unscaled with fp32 out alone, ``fp8_linear`` whole
(activation quantisation included), eager and compiled, and the W8A16 Triton kernel. attention: one
block's 32 queries (16 query / 8 KV heads of 128) over ~2.1k cached keys, 28 layers in one CUDA graph,
through FlashInfer's kernel families (fa2, fa3, auto) and page sizes 1 and 16, re-planned and replayed at
other key counts against SDPA; and through plain torch ops.
w8a16: the W8A16 kernel's tile, warps and stages swept per product at M = 32..256 (the fastest launch that
matches the twin, against ``kernel_config``'s). split_keys: the answer's attention (32 or 64 queries over a
2,106-token prompt, K = 1 or 8 rows, 28 layers in a graph) through the split-keys Triton kernels against
FlashInfer's backend, with the error against SDPA. shared_prefix: K = 4 or 8 rows' queries over their
shared prompt as one FlexAttention call, or one call of aten's flash or cuDNN kernel with the query groups
folded into the query axis (a cascade's first level), against the split keys' whole attention.
merge_quant: the split-keys output then its FP8 quantisation, against the merge kernel that quantises.
grammar: a step's planning-grammar work (allowed + the repair's feasibility) through the torch ops and
through the Triton kernel. fused_fp8: the fused W8A8
layer's kernels at M = 32..2,106 (SiLU's chunk and warps swept) and its unit-scaled FP8 products.
vision_attention: the 1080p tower's attention in bf16 (cuDNN, FlashInfer FA3) and in FP8 (FA3, per-head
scales), with its error. vision_fp8: the 1080p tower's
products in bf16 and FP8 (made operands, the whole FP8 product eager and compiled). swap_ab_forward: the
2b FP8 forward with the swap-AB products and PDL off and on (kernel time, and interleaved back-to-back
wall time); k4_forward: the same for K = 4 answers (128 rows), PDL and swap-AB products at 128 rows. The
swap-AB launch sweeps (the thirty-ninth session's with the weights in L2, the forty-second's
`split_products` from HBM, whole and split over the depth) are in git history: 5224ae3 and e1306a9.
Each number is the median of 15 graph replays of 20 (gemm, w8a16, fused_fp8), 24 (vision_attention) or 28
(attention, split_keys, shared_prefix) calls.

Usage on the device machine (FlashInfer wheels installed): python3 tools/probes/gpu_kernels.py OUT.json
[gemm,fp8,attention,w8a16,split_keys,shared_prefix,merge_quant,grammar,fused_fp8,vision_attention,
vision_fp8,swap_ab_forward,k4_forward] (the parts to run; default the first three).
Install the FlashInfer wheels first and put them on PYTHONPATH (tools/device_fast_path.sh shows how). Its
fourth-session run is docs/probes_h200_2026-11-30.json.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

DEVICE = torch.device("cuda")
# (out features, in features) of one layer's products, and the LM head
SHAPES = {
    "qkv": (4096, 2048),
    "out": (2048, 2048),
    "gate_up": (12288, 2048),
    "down": (2048, 6144),
    "head": (151936, 2048),
}
LAYERS, QUERY_HEADS, KV_HEADS, HEAD_DIM, MAX_LEN, QUERIES = 28, 16, 8, 128, 2304, 32


def graph_ms(calls: Callable[[], None]) -> float:
    """Median ms of one replay of a CUDA graph of ``calls`` (15 replays after a warm-up)."""
    calls()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def repeated(function: Callable[[], object], times: int) -> Callable[[], None]:
    def calls() -> None:
        for _ in range(times):
            function()

    return calls


def gemm() -> dict[str, dict[str, float]]:
    results = {}
    scale = torch.ones((), device=DEVICE)
    for rows in (32, 64, 128, 256):
        for name, (n, k) in SHAPES.items():
            weight = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16) * 0.02
            x = torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16)
            ms = graph_ms(repeated(lambda x=x, w=weight: F.linear(x, w), 20)) / 20
            row = {"cublas_ms": ms, "cublas_TBps": n * k * 2 / ms / 1e9}
            weight8, x8 = weight.to(torch.float8_e4m3fn), x.to(torch.float8_e4m3fn)

            def fp8(x8: torch.Tensor = x8, w8: torch.Tensor = weight8) -> torch.Tensor:
                return torch._scaled_mm(x8, w8.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

            row["fp8_ms"] = graph_ms(repeated(fp8, 20)) / 20
            if rows == 32 and name != "head":
                started = time.time()
                tuned = torch.compile(F.linear, mode="max-autotune-no-cudagraphs", dynamic=False)
                tuned(x, weight)
                row["autotune_ms"] = graph_ms(repeated(lambda x=x, w=weight, f=tuned: f(x, w), 20)) / 20
                row["autotune_compile_s"] = time.time() - started
            results[f"M{rows} {name}"] = row
            print(rows, name, json.dumps(row), flush=True)
    return results


def fp8() -> dict[str, dict[str, float]]:
    from wamdiff2_ros.decoding.fp8 import (
        fp8_linear,
        quantize_rows,
        quantize_weight,
        quantize_weight_only,
        weight_only_linear,
    )

    torch._dynamo.config.recompile_limit = 64  # one specialisation per shape, as the fast path compiles
    compiled = torch.compile(fp8_linear, dynamic=False)
    results = {}
    for rows in (32, 128, 256, 2106):
        for name, (n, k) in SHAPES.items():
            if rows > 256 and name == "head":  # the prompt's pass computes no logits
                continue
            weight = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16) * 0.02
            x = torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16)
            quantised = quantize_weight(weight)
            x8, x_scale = quantize_rows(x)
            row = {"bf16_ms": graph_ms(repeated(lambda x=x, w=weight: F.linear(x, w), 20)) / 20}

            def scaled(x8=x8, x_scale=x_scale, w=quantised) -> torch.Tensor:
                return torch._scaled_mm(
                    x8, w.data.t(), scale_a=x_scale, scale_b=w.scale, out_dtype=torch.bfloat16
                )

            row["rowwise_scaled_mm_ms"] = graph_ms(repeated(scaled, 20)) / 20

            def unit(x8=x8, w=quantised) -> torch.Tensor:  # what fp8_linear calls: scales applied after
                return torch._scaled_mm(x8, w.data.t(), scale_a=w.one, scale_b=w.one, out_dtype=torch.float32)

            row["unit_scaled_mm_fp32_out_ms"] = graph_ms(repeated(unit, 20)) / 20
            only = quantize_weight_only(weight)
            row["w8a16_kernel_ms"] = graph_ms(repeated(lambda x=x, w=only: weight_only_linear(x, w), 20)) / 20
            row["fp8_linear_ms"] = graph_ms(repeated(lambda x=x, w=quantised: fp8_linear(x, w), 20)) / 20
            compiled(x, quantised)
            row["fp8_linear_compiled_ms"] = (
                graph_ms(repeated(lambda x=x, w=quantised: compiled(x, w), 20)) / 20
            )
            results[f"M{rows} {name}"] = row
            print(rows, name, json.dumps(row), flush=True)
    return results


def attention() -> dict[str, dict[str, object]]:
    import flashinfer

    keys = [
        torch.randn(MAX_LEN, KV_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16) for _ in range(LAYERS)
    ]
    values = [torch.randn_like(k) for k in keys]
    q = torch.randn(QUERIES, QUERY_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
    out = torch.empty_like(q)

    def reference(length: int) -> torch.Tensor:  # the graph's last layer
        k, v = keys[-1][:length].transpose(0, 1)[None], values[-1][:length].transpose(0, 1)[None]
        return F.scaled_dot_product_attention(q.transpose(0, 1)[None], k, v, enable_gqa=True)[0].transpose(
            0, 1
        )

    results: dict[str, dict[str, object]] = {}
    for backend in ("fa2", "fa3", "auto"):
        for page in (1, 16):
            pages = MAX_LEN // page
            wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                torch.empty(128 << 20, dtype=torch.uint8, device=DEVICE),
                "NHD",
                use_cuda_graph=True,
                backend=backend,
                qo_indptr_buf=torch.empty(2, dtype=torch.int32, device=DEVICE),
                paged_kv_indptr_buf=torch.empty(2, dtype=torch.int32, device=DEVICE),
                paged_kv_indices_buf=torch.empty(pages, dtype=torch.int32, device=DEVICE),
                paged_kv_last_page_len_buf=torch.empty(1, dtype=torch.int32, device=DEVICE),
            )

            def plan(length: int, wrapper: object = wrapper, page: int = page) -> None:
                used = -(-length // page)
                wrapper.plan(
                    torch.tensor([0, QUERIES], dtype=torch.int32),
                    torch.tensor([0, used], dtype=torch.int32),
                    torch.arange(used, dtype=torch.int32),
                    torch.tensor([length - page * (used - 1)], dtype=torch.int32),
                    QUERY_HEADS,
                    KV_HEADS,
                    HEAD_DIM,
                    page,
                    causal=False,
                    q_data_type=torch.bfloat16,
                    kv_data_type=torch.bfloat16,
                )

            caches = [
                (k.view(-1, page, KV_HEADS, HEAD_DIM), v.view(-1, page, KV_HEADS, HEAD_DIM))
                for k, v in zip(keys, values, strict=True)
            ]

            def layers(wrapper: object = wrapper, caches: list = caches) -> None:
                for cache in caches:
                    out.copy_(wrapper.run(q, cache))

            plan(2138)
            row: dict[str, object] = {"us_per_layer": graph_ms(layers) * 1000 / LAYERS}
            errors = {}
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                layers()
            for length in (2138, 2170, 2202, 2110):  # re-plan, replay the same graph
                plan(length)
                graph.replay()
                torch.cuda.synchronize()
                errors[length] = (out.float() - reference(length).float()).abs().max().item()
            row["max_error_after_replan"] = errors
            results[f"{backend} page {page}"] = row
            print(backend, page, json.dumps(row), flush=True)
    limit, slots = torch.tensor(2138, device=DEVICE), torch.arange(MAX_LEN, device=DEVICE)
    group = QUERY_HEADS // KV_HEADS

    def plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        grouped = (
            q.view(QUERIES, KV_HEADS, group, HEAD_DIM).permute(1, 2, 0, 3).reshape(KV_HEADS, -1, HEAD_DIM)
        )
        scores = torch.matmul(grouped, k.permute(1, 2, 0)).float() * HEAD_DIM**-0.5
        weights = torch.softmax(scores.masked_fill(slots >= limit, float("-inf")), -1).to(v.dtype)
        attended = torch.matmul(weights, v.transpose(0, 1))
        return attended.view(KV_HEADS, group, QUERIES, HEAD_DIM).permute(2, 0, 1, 3).reshape_as(q)

    for label, function in (("torch eager", plain), ("torch compiled", torch.compile(plain, dynamic=False))):
        function(q, keys[0], values[0])

        def layers(function: Callable = function) -> None:
            for k, v in zip(keys, values, strict=True):
                out.copy_(function(q, k, v))

        ms = graph_ms(layers)
        error = (out.float() - reference(2138).float()).abs().max().item()
        results[label] = {"us_per_layer": ms * 1000 / LAYERS, "max_error": error}
        print(label, json.dumps(results[label]), flush=True)
    return results


def w8a16() -> dict[str, object]:
    """The W8A16 kernel's launch swept per product and M: every tile, warp and stage count below, each
    checked against the dequantised twin; the fastest per shape beside ``kernel_config``'s choice and bf16."""
    import itertools

    from wamdiff2_ros.decoding import fp8_kernel
    from wamdiff2_ros.decoding.fp8 import quantize_weight_only

    tiles = list(itertools.product((16, 32, 64, 128), (128, 256, 512), (4, 8), (3, 4, 5)))
    results: dict[str, object] = {}
    for rows in (32, 64, 128, 256):
        # one tile of M up to 64 rows: a taller tile re-reads the weights less and costs registers
        block_m = min(rows, 64)
        for name, (n, k) in SHAPES.items():
            dense = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16) * 0.02
            weight = quantize_weight_only(dense)
            x = torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16)
            twin = F.linear(x.float(), weight.data.float() * weight.scale.reshape(-1, 1))
            timed = {}
            for config in (fp8_kernel.KernelConfig(block_m, *tile) for tile in tiles):
                try:
                    out = fp8_kernel.launch(x, weight.data, weight.scale, config)
                except Exception:  # a tile whose stages do not fit in shared memory does not compile
                    continue
                if (out.float() - twin).abs().max() > 2**-6 * twin.abs().max():
                    continue
                run = lambda x=x, w=weight, c=config: fp8_kernel.launch(x, w.data, w.scale, c)  # noqa: E731
                timed[config] = graph_ms(repeated(run, 20)) / 20
            best = min(timed, key=timed.get)
            chosen = fp8_kernel.kernel_config(rows, n, k)
            if chosen not in timed:  # the default's own tile, outside the sweep
                run = lambda x=x, w=weight: fp8_kernel.launch(x, w.data, w.scale)  # noqa: E731
                timed[chosen] = graph_ms(repeated(run, 20)) / 20
            row = {
                "bf16_ms": graph_ms(repeated(lambda x=x, w=dense: F.linear(x, w), 20)) / 20,
                "default": list(chosen),
                "default_ms": timed.get(chosen),
                "best": list(best),
                "best_ms": timed[best],
                "configs_timed": len(timed),
            }
            results[f"M{rows} {name}"] = row
            print(rows, name, json.dumps(row), flush=True)
    return results


def _random_cache(rows: int):
    # The 2b shape's static cache of ``rows`` rows, every slot random.
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

    cache = StaticKVCache.allocate(LAYERS, rows, MAX_LEN, KV_HEADS, HEAD_DIM, torch.bfloat16, DEVICE)
    cache.keys.normal_()
    cache.values.normal_()
    return cache


def _answer_layers(
    attention: Any, start: int, length: int, prompt: int, q: torch.Tensor
) -> Callable[[], None]:
    # An answer forward's attention over every layer, as the decoder runs it: planned (and its first slot
    # prepared) once, then prepare + attend per layer in the timed calls.
    attention.plan(start, length, prompt)
    slot = torch.tensor(start, device=DEVICE)
    attention.prepare(slot, length)

    def layers() -> None:
        attention.prepare(slot, length)
        for layer in range(LAYERS):
            attention.attend(layer, q)

    return layers


def split_keys() -> dict[str, dict[str, float]]:
    """The answer forward's attention as the decoder runs it: the split-keys kernels (``triton``) against
    FlashInfer's backend (FA2 for one row, FA3 for K), us per layer over 28 layers in one graph."""
    from wamdiff2_ros.decoding.attention import make_attention
    from wamdiff2_ros.decoding.attention.sdpa import SdpaAttention
    from wamdiff2_ros.decoding.attention.split_keys import SplitKeysAttention
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

    prompt = 2106
    results = {}
    for rows in (1, 8):
        cache = _random_cache(rows)
        twin = StaticKVCache(cache.keys.clone(), cache.values.clone())
        twin.share_prompt(prompt)
        for length in (32, 64):
            start = prompt + 64
            q = torch.randn(rows, length, QUERY_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
            sdpa = SdpaAttention(twin, 32)
            sdpa.prepare(torch.tensor(start, device=DEVICE), length)
            exact = sdpa.attend(LAYERS - 1, q).float()
            variants = ["flashinfer", "triton"] + [  # chunk, keys per step, warps of the split-keys kernel
                f"triton {chunk} {keys} {warps}" for chunk in (128, 256, 512) for keys in (32, 64, 128)
                for warps in (4, 8) if chunk >= keys
            ] + ["triton 128 64 4 bf16", "triton 256 64 4 bf16"]  # fmt: skip
            for name in variants:
                if name.startswith("triton "):
                    chunk, keys, warps = (int(v) for v in name.split()[1:4])
                    partials = torch.bfloat16 if name.endswith("bf16") else torch.float32
                    attention = SplitKeysAttention(cache, 32, QUERY_HEADS, chunk, keys, warps, partials)
                else:
                    attention = make_attention(name, cache, 32, True, QUERY_HEADS)
                layers = _answer_layers(attention, start, length, prompt, q)
                out = attention.attend(LAYERS - 1, q).float()  # after the layers' plan and prepare
                row = {
                    "us_per_layer": graph_ms(layers) * 1000 / LAYERS,
                    "rel_error": float((out - exact).norm() / exact.norm()),
                }
                results[f"K{rows} n{length} {name}"] = row
                print(rows, length, name, row, flush=True)
    return results


def _fold_groups(q: torch.Tensor) -> torch.Tensor:
    # (rows, n, Hq, D) -> (1, Hkv, groups * rows * n, D): query head h reads key head h // groups (SDPA's GQA)
    rows, length = q.shape[:2]
    grouped = q.reshape(rows * length, KV_HEADS, QUERY_HEADS // KV_HEADS, HEAD_DIM)
    return grouped.permute(1, 2, 0, 3).reshape(1, KV_HEADS, -1, HEAD_DIM).contiguous()


def _unfold_groups(out: torch.Tensor) -> torch.Tensor:
    # _fold_groups' output layout back to (1, Hq, rows * n, D)
    return out.reshape(QUERY_HEADS, -1, HEAD_DIM)[None]


def shared_prefix() -> dict[str, dict[str, float]]:
    """K candidate rows' attention over the prompt they share, as one FlexAttention call over every row's
    queries (with its log-sum-exp, what a merge with the rows' own answer keys would take: cascade
    attention), against the split-keys kernels' whole answer attention at the same shape; us per layer, 28
    layers in one graph. The prefix alone: if it is not well under the split keys' time, a cascade cannot
    pay (docs/DECISIONS.md, "K rows keep reading the prompt")."""
    from wamdiff2_ros.decoding.attention.flex import _kernel
    from wamdiff2_ros.decoding.attention.split_keys import SplitKeysAttention

    prompt = 2106
    flex = _kernel(DEVICE)  # the prompt's own compiled FlexAttention
    results = {}
    for rows in (4, 8):
        cache = _random_cache(rows)
        # each layer's prompt K/V read in place from row 0, as FlexAttention takes them: (1, Hkv, P, D) views
        keys, values = (
            [side[layer, :1, :prompt].transpose(1, 2) for layer in range(LAYERS)]
            for side in (cache.keys, cache.values)
        )
        for length in (32, 64):
            start = prompt + 64
            q = torch.randn(rows, length, QUERY_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
            stacked = q.reshape(rows * length, QUERY_HEADS, HEAD_DIM).transpose(0, 1)[None].contiguous()
            exact = F.scaled_dot_product_attention(stacked, keys[-1], values[-1], enable_gqa=True).float()
            split_keys_layers = _answer_layers(
                SplitKeysAttention(cache, 32, QUERY_HEADS), start, length, prompt, q
            )

            def prefix_layers(stacked=stacked, pieces=1, keys=keys, values=values) -> None:
                for layer in range(LAYERS):
                    for part in stacked.chunk(pieces, dim=2):
                        flex(part, keys[layer], values[layer], enable_gqa=True, return_lse=True)

            def error(pieces: int, stacked=stacked, keys=keys, values=values, exact=exact) -> float:
                parts = [flex(part, keys[-1], values[-1], enable_gqa=True, return_lse=True)[0]
                         for part in stacked.chunk(pieces, dim=2)]  # fmt: skip
                return float((torch.cat(parts, dim=2).float() - exact).norm() / exact.norm())

            pieces = max(1, stacked.shape[2] // 128)
            # The same prefix through aten's flash and cuDNN kernels, which return the log-sum-exp but take
            # as many key heads as query heads: each key head's two query heads go along the query axis.
            folded = _fold_groups(q)
            unfold_error = lambda out, exact=exact: float(  # noqa: E731
                (_unfold_groups(out).float() - exact).norm() / exact.norm()
            )
            aten_kernels = {
                "flash": lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[0],
                "cudnn": lambda q, k, v: torch.ops.aten._scaled_dot_product_cudnn_attention(
                    q, k, v, None, True
                )[0],
            }
            variants = {
                "split keys, whole attention": (split_keys_layers, None),
                "flex prefix, one call": (prefix_layers, error(1)),
                "flex prefix, 128-query calls": (
                    lambda stacked=stacked, pieces=pieces: prefix_layers(stacked, pieces),
                    error(pieces),
                ),
            }
            for kernel_name, kernel in aten_kernels.items():
                try:
                    rel_error = unfold_error(kernel(folded, keys[-1], values[-1]))
                except RuntimeError as failure:  # a kernel this build or shape lacks
                    print(kernel_name, "prefix failed:", failure, flush=True)
                    continue

                def aten_layers(kernel=kernel, folded=folded, keys=keys, values=values) -> None:
                    for layer in range(LAYERS):
                        kernel(folded, keys[layer], values[layer])

                variants[f"{kernel_name} prefix, groups folded"] = (aten_layers, rel_error)
            for name, (layers, rel_error) in variants.items():
                row = {"us_per_layer": graph_ms(layers) * 1000 / LAYERS, "rel_error": rel_error}
                results[f"K{rows} n{length} {name}"] = row
                print(rows, length, name, row, flush=True)
    return results


def merge_quant() -> dict[str, dict[str, float]]:
    """The fused FP8 layers' attention output: the split-keys kernels then ``quant_rows``, against the
    merge kernel that quantises (``attend_quantized``), us per layer over 28 layers in one graph."""
    from wamdiff2_ros.decoding import fp8_fused
    from wamdiff2_ros.decoding.attention.split_keys import SplitKeysAttention

    prompt = 2106
    results = {}
    for rows in (1, 8):
        attention = SplitKeysAttention(_random_cache(rows), 32, QUERY_HEADS)
        for length in (32, 64):
            start = prompt + 64
            q = torch.randn(rows, length, QUERY_HEADS, HEAD_DIM, device=DEVICE, dtype=torch.bfloat16)
            attention.plan(start, length, prompt)
            slot = torch.tensor(start, device=DEVICE)
            variants = {
                "attend": attention.attend,
                "attend + quant_rows": lambda layer, q, attention=attention: fp8_fused.quant_rows(
                    attention.attend(layer, q).reshape(-1, QUERY_HEADS * HEAD_DIM)
                ),
                "attend_quantized": attention.attend_quantized,
            }
            for name, attend in variants.items():

                def layers(attend=attend, slot=slot, q=q, length=length, attention=attention) -> None:
                    attention.prepare(slot, length)
                    for layer in range(LAYERS):
                        attend(layer, q)

                results[f"K{rows} n{length} {name}"] = {"us_per_layer": graph_ms(layers) * 1000 / LAYERS}
                print(rows, length, name, results[f"K{rows} n{length} {name}"], flush=True)
    return results


def grammar() -> dict[str, dict[str, float]]:
    """A denoising step's grammar work (``allowed`` and the commit repair's ``feasible`` over K x B trial
    rows) for the padded planning grammar at B = 32, through the torch ops and through the Triton kernel
    (``device_grammar_kernels``), us per step in a graph, compiled as the device loop compiles its step."""
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.device_grammar import DeviceGrammar
    from wamdiff2_ros.decoding.engine import planning_grammar
    from wamdiff2_ros.decoding.fast_model import compiled
    from wamdiff2_ros.model.tokenizer import MASK_ID, load_tokenizer

    host = planning_grammar(load_tokenizer(), DecodeConfig(min_int_digits=2, max_new_tokens=128))
    results = {}
    for rows in (1, 4, 8):
        generator = torch.Generator().manual_seed(0)
        tokens = host.token_ids[torch.randint(0, len(host.token_ids), (rows, 32), generator=generator)].cuda()
        masked = (torch.rand(rows, 32, generator=generator) < 0.7).cuda()
        states = torch.full((rows,), host.start_state, device=DEVICE)
        budget = (torch.tensor(32, device=DEVICE), torch.tensor(64, device=DEVICE))
        for kernel in (False, True):
            device = DeviceGrammar(host, DEVICE, MASK_ID, kernel=kernel)

            def step(device=device, tokens=tokens, masked=masked, states=states, budget=budget) -> None:
                device.allowed(states, tokens, masked, *budget)
                trial = tokens.repeat(32, 1)
                device.feasible(states.repeat_interleave(32), trial, masked.repeat(32, 1), *budget)

            name = f"K{rows} {'kernel' if kernel else 'torch ops'}"
            results[name] = {"us_per_step": graph_ms(compiled(step)) * 1000}
            print(name, results[name], flush=True)
    return results


def fused_fp8() -> dict[str, dict[str, float]]:
    """The fused W8A8 layer's own kernels (decoding/fp8_fused.py) at the 2b shape, us per call (20 in a
    graph), SiLU's at chunks of 1,024 / 2,048 / 8,192 and 4 / 8 / 16 warps; beside them the FP8 products
    they feed."""
    results = {}
    for rows in (32, 64, 256, 2106):
        for name, function in _fused_fp8_calls(rows).items():
            results[f"M{rows} {name}"] = {"us": graph_ms(repeated(function, 20)) / 20 * 1000}
            print(rows, name, results[f"M{rows} {name}"], flush=True)
    return results


def _fused_fp8_calls(rows: int) -> dict[str, Callable[[], object]]:
    from wamdiff2_ros.decoding import fp8_fused as fused
    from wamdiff2_ros.decoding.fp8 import quantize_weight
    from wamdiff2_ros.decoding.lean_layers import rope_angles

    x = torch.randn(rows, 2048, device=DEVICE, dtype=torch.bfloat16)
    raw = torch.randn(rows, 12288, device=DEVICE, dtype=torch.bfloat16) * 300
    row_scale = torch.rand(rows, 1, device=DEVICE) * 0.01
    col_scale = torch.rand(1, 12288, device=DEVICE) * 0.01
    weight = torch.ones(2048, device=DEVICE, dtype=torch.bfloat16)
    residual = raw[:, :2048].contiguous()
    qkv = raw[:, :4096].reshape(1, rows, 4096).contiguous()
    qk_norm = torch.ones(24, 128, device=DEVICE, dtype=torch.bfloat16)
    slots = torch.arange(rows, device=DEVICE)
    cos, sin = rope_angles(slots, torch.ones(64, device=DEVICE), torch.bfloat16)
    keys, values = (torch.zeros(1, rows, 8, 128, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    operands = {"h": fused.quant_rows(x)[0], "m": fused.silu_mul_quant(raw, row_scale, col_scale)[0]}
    calls = {
        "add_norm_quant": lambda: fused.add_norm_quant(x, residual, row_scale, col_scale, weight, 1e-6),
        "quant_rows": lambda: fused.quant_rows(x),
        "rope_store": lambda: fused.rope_store(
            qkv, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, 16, 1e-6
        ),
        "rope_store one head a program": lambda: fused.launch_rope_store(
            qkv, row_scale, col_scale, qk_norm, cos, sin, keys, values, slots, 16, 1e-6, group=1
        ),
        **{
            f"silu_mul_quant block {block} {warps} warps": lambda w=warps, b=block: (
                fused.launch_silu_mul_quant(raw, row_scale, col_scale, w, b)
            )
            for block in (1024, 2048, 8192)
            for warps in (4, 8, 16)
        },
    }
    for name, (n, k) in SHAPES.items():
        if name != "head":
            quantised = quantize_weight(torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16) * 0.02)
            operand = operands["m" if name == "down" else "h"]
            calls[f"product {name}"] = lambda a=operand, w=quantised: fused.product(a, w, torch.bfloat16)
    return calls


def vision_attention() -> dict[str, dict[str, float]]:
    """The 1080p vision tower's attention (16 heads of 64 over 7,920 patches, one block), bf16 against FP8
    (FlashInfer's FA3 with per-head scales; issue 18's lever for the 18 ms tower): ms per call as the tower
    makes it (24 in a graph, divided) and the error against an fp32 reference."""
    import flashinfer

    patches, heads, dim, blocks = 7920, 16, 64, 24
    q, k, v = (torch.randn(patches, heads, dim, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
    exact = F.scaled_dot_product_attention(*(t.float().transpose(0, 1)[None] for t in (q, k, v)))
    exact = exact[0].transpose(0, 1)

    def error(out: torch.Tensor) -> float:
        return float((out.float() - exact).norm() / exact.norm())

    def sdpa() -> torch.Tensor:
        heads_first = (t.transpose(0, 1)[None] for t in (q, k, v))
        return F.scaled_dot_product_attention(*heads_first)[0].transpose(0, 1)

    def quantised() -> tuple[torch.Tensor, ...]:  # per-head amax scales, as a tower would make them
        out = []
        for t in (q, k, v):
            scale = t.abs().amax(dim=(0, 2)).float().clamp_min(1e-6) / 448.0
            out += [(t / scale[None, :, None]).to(torch.float8_e4m3fn), scale]
        return tuple(out)

    def fp8_attention(q8, sq, k8, sk, v8, sv) -> torch.Tensor:
        return flashinfer.single_prefill_with_kv_cache(
            q8, k8, v8, scale_q=sq, scale_k=sk, scale_v=sv, o_dtype=torch.bfloat16, backend="fa3"
        )

    stored = quantised()
    rows = {
        "bf16 sdpa (cuDNN)": sdpa,
        "bf16 flashinfer fa3": lambda: flashinfer.single_prefill_with_kv_cache(q, k, v, backend="fa3"),
        "fp8 flashinfer fa3, kernel only": lambda: fp8_attention(*stored),
        "fp8 flashinfer fa3 with quantisation": lambda: fp8_attention(*quantised()),
    }
    results = {}
    for name, function in rows.items():
        results[name] = {"ms": graph_ms(repeated(function, blocks)) / blocks, "rel_error": error(function())}
        print(name, results[name], flush=True)
    return results


def _timed(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """us per call of each of ``calls`` (20 in a graph; a launch the card cannot take is skipped)."""
    timed = {}
    for name, call in calls.items():
        try:
            timed[name] = graph_ms(repeated(call, 20)) / 20 * 1000
        except Exception as error:  # shared memory or registers over the card's
            print("skipped", name, type(error).__name__, flush=True)
    return timed


def _fastest(calls: dict[str, Callable[[], object]]) -> tuple[str, float]:
    """The name and us per call of the fastest of ``calls``."""
    timed = _timed(calls)
    best = min(timed, key=timed.get)
    return best, timed[best]


def vision_fp8() -> dict[str, dict[str, float]]:
    """The 1080p vision tower's four products (7,920 patch rows, the 2b tower's widths), us per call (20 in a
    graph): bf16 ``F.linear`` with bias, FP8 operands already made (unit-scaled and row-wise-scaled
    ``_scaled_mm``), the whole FP8 product (the rows' quantisation and the bias in the epilogue) eager and
    compiled, and a compiled LayerNorm with and without the quantisation after it."""
    from wamdiff2_ros.decoding import fp8 as fp8_module

    rows, width = 7920, 1024
    results = {}
    one = torch.ones((), device=DEVICE)
    for name, (n, k) in {
        "qkv": (3072, 1024),
        "proj": (1024, 1024),
        "fc1": (4096, 1024),
        "fc2": (1024, 4096),
    }.items():
        x = torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16)
        weight = torch.randn(n, k, device=DEVICE, dtype=torch.bfloat16) * 0.02
        bias = torch.randn(n, device=DEVICE, dtype=torch.bfloat16) * 0.02
        quantised = fp8_module.quantize_weight(weight)
        x8, xs = fp8_module.quantize_rows(x)

        def whole(x=x, w=quantised, b=bias):
            # the bias in _scaled_mm's epilogue: a separate add rereads the output (H100: +30 us at qkv)
            rows8, scale = fp8_module.quantize_rows(x)
            return torch._scaled_mm(
                rows8, w.data.t(), scale_a=scale, scale_b=w.scale, bias=b, out_dtype=torch.bfloat16
            )

        compiled = torch.compile(whole)
        calls = {
            "bf16": lambda x=x, w=weight, b=bias: F.linear(x, w, b),
            "scaled_mm unit": lambda a=x8, w=quantised: torch._scaled_mm(
                a, w.data.t(), one, one, out_dtype=torch.bfloat16
            ),
            "scaled_mm rowwise": lambda a=x8, s=xs, w=quantised: torch._scaled_mm(
                a, w.data.t(), scale_a=s, scale_b=w.scale, out_dtype=torch.bfloat16
            ),
            "fp8 eager": whole,
            "fp8 compiled": compiled,
        }
        results[name] = {call: graph_ms(repeated(f, 20)) / 20 * 1000 for call, f in calls.items()}
        print(name, results[name], flush=True)
    x = torch.randn(rows, width, device=DEVICE, dtype=torch.bfloat16)
    norm_weight, norm_bias = torch.ones(width, device=DEVICE), torch.zeros(width, device=DEVICE)

    def norm(x=x):
        return F.layer_norm(x, (width,), norm_weight.bfloat16(), norm_bias.bfloat16(), 1e-6)

    def norm_quant(x=x):
        return fp8_module.quantize_rows(norm(x))

    results["layer_norm"] = {
        "compiled": graph_ms(repeated(torch.compile(norm), 20)) / 20 * 1000,
        "compiled with quantisation": graph_ms(repeated(torch.compile(norm_quant), 20)) / 20 * 1000,
    }
    print("layer_norm", results["layer_norm"], flush=True)
    return results


def _back_to_back_ms(replay: Callable[[], None], times: int = 20) -> float:
    """ms a call of ``replay`` called ``times`` times back to back (CUDA events around them all): the host's
    launch and the sync are hidden behind the device's work, unlike ``time_call``'s one call at a time."""
    replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(times):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / times


def swap_ab_forward() -> dict[str, dict[str, object]]:
    """The 2b preset's graphed, compiled 32-token FP8 forward after a 1080p prompt (``bench profile``'s
    forward) with the swap-AB products off and on (``fp8_fused.SWAP_AB_ON_CUDA``) and PDL
    (``pdl.PDL_ON_CUDA``), and with PDL two launches not yet in ``SWAP_AB``: the down product through the
    swap-AB kernel (cuBLAS's today: with PDL its programs would prefetch its weights while `silu_mul` runs)
    and gate/up with 64 weight rows a program (``_forward_variants``)."""
    down = {(32, 2048, 6144): (64, 256, 4, 3)}  # 32 programs over a depth of 6,144: each prefetches 0.4 MB
    gate_up = {(32, 12288, 2048): (64, 256, 4, 3)}  # the HBM sweep's fastest whole launch, PDL off
    return _forward_variants(1, {
        "swap-AB + PDL": {},  # the forward as it runs today first: a cut-off keeps it
        "swap-AB + PDL, down swap-AB": {"launches": down},
        "swap-AB + PDL, gate/up 64x256": {"launches": gate_up},
        "swap-AB": {"pdl": False},
        "off": {"swap_ab": False, "pdl": False},
    })  # fmt: skip


def k4_forward() -> dict[str, dict[str, object]]:
    """The same forward for K = 4 answers (128 rows, the node's default), where every product is cuBLAS's
    and no launch takes PDL today, against PDL on its launches (``pdl.PDL_MAX_ROWS`` 128) and the products
    through the swap-AB kernel at 128 rows (the launches the forty-second session's HBM sweep found
    fastest, 1-1.5 us slower than cuBLAS each without PDL; with it their programs prefetch their weights)."""
    at_128 = {
        (128, 4096, 2048): (64, 256, 4, 3), (128, 2048, 2048): (64, 256, 4, 3),
        (128, 12288, 2048): (128, 256, 8, 3), (128, 2048, 6144): (64, 256, 4, 3),
    }  # fmt: skip
    return _forward_variants(4, {
        "today": {},
        "PDL": {"max_rows": 128},
        "swap-AB + PDL": {"max_rows": 128, "launches": at_128},
        "swap-AB": {"launches": at_128},
    })  # fmt: skip


def _forward_variants(rows: int, variants: dict[str, dict[str, Any]]) -> dict[str, dict[str, object]]:
    # The 2b FP8 forward of a 32-token block for ``rows`` answers after the 1080p prompt, built and captured
    # under each variant's settings (over the defaults: ``swap_ab`` and ``pdl`` on or off, ``max_rows`` for
    # PDL, ``launches`` added to SWAP_AB; restored after), then each one's kernel time by kind (one profile;
    # with PDL it counts the early programs' waits: compare wall times) and its wall time in 5 interleaved
    # rounds of 20 back-to-back replays (the median and the rounds), so the card's drift between variants
    # (up to 14 % in the forty-first session's one-at-a-time timing) falls on all of them alike.
    from wamdiff2_ros.cli.bench import _prompt
    from wamdiff2_ros.decoding import fp8_fused, pdl
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.fast import FastDecoder
    from wamdiff2_ros.eval import speed
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.tokenizer import MASK_ID, load_tokenizer

    model = build_model("2b", seed=0, dtype="bf16", device=DEVICE)
    prompt = _prompt(load_tokenizer(), "1920x1080")
    config = DecodeConfig(
        block_size=32, steps=8, commit_rule="low_confidence_static", backend="triton", cuda_graphs=True,
        compile=True, weights="fp8", candidates=rows, temperature=0.7 if rows > 1 else 0.0,
    )  # fmt: skip
    results: dict[str, dict[str, object]] = {}
    replays: dict[str, Callable[[], None]] = {}
    swap_ab, launch_pdl, max_rows = fp8_fused.SWAP_AB_ON_CUDA, pdl.PDL_ON_CUDA, pdl.PDL_MAX_ROWS
    table = dict(fp8_fused.SWAP_AB)
    try:
        for name, setting in variants.items():
            fp8_fused.SWAP_AB_ON_CUDA = setting.get("swap_ab", swap_ab)
            pdl.PDL_ON_CUDA = setting.get("pdl", launch_pdl)
            pdl.PDL_MAX_ROWS = setting.get("max_rows", max_rows)
            fp8_fused.SWAP_AB.clear()
            fp8_fused.SWAP_AB.update({**table, **setting.get("launches", {})})
            try:  # one variant that fails to build must not cost the call the others
                cache = FastDecoder(model, config, prompt.length, device_loop=False).cache
                cache.prefill(prompt)
                cache.denoise(torch.full((rows, 32), MASK_ID, device=DEVICE))  # captures the forward's graph
            except Exception as error:  # a probe: the error is the result
                results[name] = {"error": repr(error)}
                print(name, "failed:", repr(error), flush=True)
                continue
            graph = cache.graphs.graphs[32][0]

            def replay(cache: Any = cache, graph: Any = graph) -> None:
                cache.place(32)
                graph.replay()

            replays[name] = replay
            results[name] = speed.profile_replays(replay, DEVICE)
            print(name, json.dumps(results[name]), flush=True)
    finally:  # the defaults back for the next part
        fp8_fused.SWAP_AB_ON_CUDA, pdl.PDL_ON_CUDA, pdl.PDL_MAX_ROWS = swap_ab, launch_pdl, max_rows
        fp8_fused.SWAP_AB.clear()
        fp8_fused.SWAP_AB.update(table)
    rounds: dict[str, list[float]] = {name: [] for name in replays}
    for _ in range(5):
        for name, replay in replays.items():
            rounds[name].append(_back_to_back_ms(replay))
    for name, walls in rounds.items():
        results[name]["back_to_back_ms"] = sorted(walls)[len(walls) // 2]
        results[name]["back_to_back_rounds_ms"] = walls
        print(name, "back to back", [round(w, 4) for w in walls], flush=True)
    return results


if __name__ == "__main__":
    torch.manual_seed(0)
    parts = sys.argv[2].split(",") if len(sys.argv) > 2 else ["gemm", "fp8", "attention"]
    probes = {
        "gemm": gemm,
        "fp8": fp8,
        "attention": attention,
        "w8a16": w8a16,
        "split_keys": split_keys,
        "shared_prefix": shared_prefix,
        "fused_fp8": fused_fp8,
        "merge_quant": merge_quant,
        "grammar": grammar,
        "vision_attention": vision_attention,
        "vision_fp8": vision_fp8,
        "swap_ab_forward": swap_ab_forward,
        "k4_forward": k4_forward,
    }
    report = {part: probes[part]() for part in parts}
    with open(sys.argv[1], "w") as file:
        json.dump(report, file, indent=1)
