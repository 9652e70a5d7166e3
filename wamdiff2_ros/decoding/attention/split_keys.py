"""Split-keys attention for the answer's forwards: a Triton kernel pair over the static cache (``triton``).

An answer forward is 32 queries (64 in the fused order) over ~2,100 cached keys: far too little work to fill
132 SMs if one program takes a KV head's queries over all keys. FlashInfer's FA2 splits the keys too but
took 15.5 us per layer on the H200 (docs/BENCHMARKS.md), against a floor of ~2 us for reading the layer's
8.8 MB of K/V. Here the keys are cut into fixed chunks of ``CHUNK``: one program per (chunk, KV head, query
tile) computes the tile's softmax-weighted values over its chunk with its log-sum-exp, and a second kernel
merges the chunks (flash-decoding). The grid depends only on the cache's size, never on the prompt: chunks
past a forward's keys exit at once, and the first slot and the prompt length are read from the device, so
one captured launch serves every forward of the same query count.

Visibility is the block-causal rule of ``SdpaAttention`` (its twin): query i of a forward of n from slot s
sees keys below ``min(s + (i // B + 1) * B, s + n)``. Slots below the prompt length are read from row 0 (the
K candidate rows share the prompt). The grouped query heads of one KV head are packed as rows of one tile,
so a tile's K/V are loaded once for all of them. The prompt itself goes through FlexAttention on CUDA (or
FlashInfer, or SDPA: ``attention.prompt_backend``): compute-bound, where these kernels have nothing to add.
Triton is imported when a backend is built; a CPU cache runs under ``TRITON_INTERPRET=1`` (how the tests
check it without a GPU).
"""

from __future__ import annotations

import functools
import math
import os
from typing import TYPE_CHECKING

import torch

from wamdiff2_ros.decoding.pdl import launch_options

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

# The H200 sweep's choice (docs/BENCHMARKS.md, "Split-keys attention"): chunks of 256 keys, 32 per inner
# step, 4 warps: 12.3 / 16.9 / 40.2 us per layer for 32 / 64 queries / 8 rows of 32, where larger chunks,
# 64 keys per step or 8 warps are level or slower, and bf16 partials slower still.
CHUNK = 256  # keys per program
KEYS_PER_STEP = 32  # keys per inner iteration of a program
PACKED_ROWS = 64  # query rows (queries x grouped heads) per tile


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def partial(
        q_ptr, k_ptr, v_ptr, bounds_ptr, out_ptr, lse_ptr, n, tiles_per_row, max_len, scale,
        QUERY_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
        QUERIES: tl.constexpr, KEYS: tl.constexpr, CHUNK: tl.constexpr, INTERPRETED: tl.constexpr,
        PDL: tl.constexpr,
    ):  # fmt: skip
        chunk, head, tile = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        if PDL:  # decoding/pdl.py (a closure's kernel sees no helper of another module)
            # Before the wait, row 0's programs ask L2 for their chunk's prompt keys and values: written
            # by the prefill, read by every row, and by no kernel of a forward written (the prompt length
            # is set by `plan` before the graph), so they may come while the kernel before still runs.
            prompt = tl.load(bounds_ptr + 1)
            if (tile < tiles_per_row) & (chunk * CHUNK < prompt):
                slots = tl.minimum(chunk * CHUNK + tl.arange(0, CHUNK), prompt - 1)
                offsets = (slots.to(tl.int64) * KV_HEADS + head) * D
                size = tl.zeros_like(slots) + D * (k_ptr.dtype.element_ty.primitive_bitwidth // 8)
                tl.inline_asm_elementwise(
                    "cp.async.bulk.prefetch.L2.global [$1], $2; // $0", "=r,l,r", [k_ptr + offsets, size],
                    dtype=tl.int32, is_pure=False, pack=1,
                )  # fmt: skip
                tl.inline_asm_elementwise(
                    "cp.async.bulk.prefetch.L2.global [$1], $2; // $0", "=r,l,r", [v_ptr + offsets, size],
                    dtype=tl.int32, is_pure=False, pack=1,
                )  # fmt: skip
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        group: tl.constexpr = QUERY_HEADS // KV_HEADS
        rows: tl.constexpr = QUERIES * group
        row, query_tile = tile // tiles_per_row, tile % tiles_per_row
        start, shared = tl.load(bounds_ptr), tl.load(bounds_ptr + 1)
        packed = tl.arange(0, rows)
        query = query_tile * QUERIES + packed // group
        query_head = head * group + packed % group
        valid = query < n
        limit = tl.where(valid, tl.minimum(start + (query // BLOCK + 1) * BLOCK, start + n), 0)
        dims = tl.arange(0, D)
        q = tl.load(
            q_ptr + ((row * n + query) * QUERY_HEADS + query_head)[:, None] * D + dims[None, :],
            mask=valid[:, None],
            other=0.0,
        )
        low = chunk * CHUNK
        high = tl.minimum(low + CHUNK, tl.max(limit, axis=0))
        best = tl.full((rows,), float("-inf"), tl.float32)
        total = tl.zeros((rows,), tl.float32)
        accumulator = tl.zeros((rows, D), tl.float32)
        for first in range(low, high, KEYS):
            slots = first + tl.arange(0, KEYS)
            source = tl.where(slots < shared, 0, row)  # the prompt lives in row 0
            offsets = ((source * max_len + slots) * KV_HEADS + head)[:, None] * D + dims[None, :]
            inside = slots[:, None] < high
            k = tl.load(k_ptr + offsets, mask=inside, other=0.0)
            v = tl.load(v_ptr + offsets, mask=inside, other=0.0)
            if INTERPRETED:  # the interpreter multiplies bf16 operands' raw bits: give it fp32
                scores = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
            else:
                scores = tl.dot(q, tl.trans(k))
            scores = tl.where(slots[None, :] < limit[:, None], scores * scale, float("-inf"))
            new_best = tl.maximum(best, tl.max(scores, axis=1))
            reference = tl.where(new_best == float("-inf"), 0.0, new_best)  # rows that see no key yet
            weights = tl.exp(scores - reference[:, None])
            decay = tl.exp(best - reference)
            total = total * decay + tl.sum(weights, axis=1)
            if INTERPRETED:
                accumulator = accumulator * decay[:, None] + tl.dot(weights, v.to(tl.float32))
            else:
                accumulator = accumulator * decay[:, None] + tl.dot(weights.to(v.dtype), v)
            best = new_best
        seen = total > 0
        part = (tile * KV_HEADS + head) * tl.num_programs(0) + chunk
        tl.store(
            out_ptr + (part * rows + packed)[:, None] * D + dims[None, :],
            (accumulator / tl.where(seen, total, 1.0)[:, None]).to(out_ptr.dtype.element_ty),
        )
        tl.store(lse_ptr + part * rows + packed, tl.where(seen, best + tl.log(total), float("-inf")))

    @triton.jit
    def merge(
        parts_ptr, lse_ptr, out_ptr, n, tiles_per_row, chunks,
        QUERY_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, QUERIES: tl.constexpr,
        CHUNKS: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        # One program per packed row: all its chunks in one load (a loop over chunks is latency-bound).
        if PDL:  # decoding/pdl.py (a closure's kernel sees no helper of another module)
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        tile, head, packed = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        group: tl.constexpr = QUERY_HEADS // KV_HEADS
        rows: tl.constexpr = QUERIES * group
        row, query_tile = tile // tiles_per_row, tile % tiles_per_row
        query = query_tile * QUERIES + packed // group
        if query < n:
            chunk = tl.arange(0, CHUNKS)
            part = ((tile * KV_HEADS + head) * chunks + chunk) * rows + packed
            lse = tl.load(lse_ptr + part, mask=chunk < chunks, other=float("-inf"))
            best = tl.max(lse, axis=0)
            weights = tl.exp(lse - tl.where(best == float("-inf"), 0.0, best))
            dims = tl.arange(0, D)
            inside = (chunk < chunks)[:, None]  # padding chunks read 0 (their weight is 0: no 0 * NaN)
            values = tl.load(parts_ptr + part[:, None] * D + dims[None, :], mask=inside, other=0.0)
            values = values.to(tl.float32)
            total = tl.sum(weights, axis=0)
            merged = tl.sum(weights[:, None] * values, axis=0) / tl.where(total > 0, total, 1.0)
            query_head = head * group + packed % group
            tl.store(
                out_ptr + ((row * n + query) * QUERY_HEADS + query_head) * D + dims,
                merged.to(out_ptr.dtype.element_ty),
            )

    @triton.jit
    def merge_quant(
        parts_ptr, lse_ptr, q8_ptr, scale_ptr, n, tiles_per_row, chunks,
        QUERY_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, QUERIES: tl.constexpr,
        CHUNKS: tl.constexpr, OUT_DTYPE: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        # One program per query, all its heads as one (Hq, D) tile in registers: each head merged as
        # ``merge`` merges it and rounded to the attention's output dtype, then the row quantised to e4m3
        # with one scale, as ``fp8.quantize_rows`` quantises ``attend``'s output: the fused FP8 layers'
        # attention input with no kernel of its own (and no round trip through memory).
        if PDL:  # decoding/pdl.py (a closure's kernel sees no helper of another module)
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        flat = tl.program_id(0)  # row * n + query
        group: tl.constexpr = QUERY_HEADS // KV_HEADS
        rows: tl.constexpr = QUERIES * group
        row, query = flat // n, flat % n
        tile = row * tiles_per_row + query // QUERIES
        heads = tl.arange(0, QUERY_HEADS)
        packed = (query % QUERIES) * group + heads % group
        base = (tile * KV_HEADS + heads // group) * chunks  # (Hq,) first partial of each head
        chunk = tl.arange(0, CHUNKS)
        inside = (chunk < chunks)[None, :]
        offsets = (base[:, None] + chunk[None, :]) * rows + packed[:, None]
        lse = tl.load(lse_ptr + offsets, mask=inside, other=float("-inf"))  # (Hq, CHUNKS)
        best = tl.max(lse, axis=1)
        best = tl.where(best == float("-inf"), 0.0, best)
        total = tl.sum(tl.exp(lse - best[:, None]), axis=1)
        dims = tl.arange(0, D)
        merged = tl.zeros((QUERY_HEADS, D), tl.float32)
        for index in range(0, chunks):
            part = (base + index) * rows + packed  # (Hq,)
            weight = tl.exp(tl.load(lse_ptr + part) - best)
            values = tl.load(parts_ptr + part[:, None] * D + dims[None, :]).to(tl.float32)
            merged += weight[:, None] * values
        merged = (merged / tl.where(total > 0, total, 1.0)[:, None]).to(OUT_DTYPE).to(tl.float32)
        scale = tl.maximum(tl.math.div_rn(tl.max(tl.max(tl.abs(merged), axis=1), axis=0), 448.0), 1e-12)
        q = tl.minimum(tl.maximum(tl.math.div_rn(merged, scale), -448.0), 448.0)
        offsets = (flat * QUERY_HEADS + heads)[:, None] * D + dims[None, :]
        tl.store(q8_ptr + offsets, q.to(q8_ptr.dtype.element_ty))
        tl.store(scale_ptr + flat, scale)

    return partial, merge, merge_quant


class SplitKeysAttention:
    """The answer's forwards through the split-keys kernels (see the module docstring).

    Args:
        cache: the static cache (CUDA, or CPU under Triton's interpreter).
        block_size: B.
        query_heads: Hq (a power-of-two multiple of the cache's Hkv, at most ``PACKED_ROWS``).
        chunk: keys per program (a multiple of ``keys_per_step``).
        keys_per_step: keys per inner iteration of a program.
        warps: warps per program of the partial kernel.
        partials: dtype of the chunks' normalised partial outputs (their log-sum-exps stay fp32).

    Raises:
        ImportError: Triton is not installed.
        ValueError: the head grouping does not pack into a tile, or the cache is not on a CUDA device
            (outside Triton's interpreter).
    """

    shares_prompt = True  # rows read row 0's prompt slots

    def __init__(
        self,
        cache: StaticKVCache,
        block_size: int,
        query_heads: int,
        chunk: int = CHUNK,
        keys_per_step: int = KEYS_PER_STEP,
        warps: int = 4,
        partials: torch.dtype = torch.float32,
    ) -> None:
        import triton  # fail at construction, not at the first forward

        self.interpreted = os.environ.get("TRITON_INTERPRET") == "1"
        if cache.device.type != "cuda" and not self.interpreted:
            raise ValueError(f"the split-keys kernels need a CUDA cache, got one on {cache.device}")
        kv_heads, head_dim = cache.keys.shape[3:]
        group = query_heads // kv_heads
        if query_heads % kv_heads or group & (group - 1) or group > PACKED_ROWS or head_dim & (head_dim - 1):
            raise ValueError(f"cannot pack {query_heads} query heads over {kv_heads} of {head_dim} in a tile")
        self.cache = cache
        self.block_size = block_size
        self.query_heads, self.kv_heads, self.head_dim = query_heads, kv_heads, head_dim
        self.queries = PACKED_ROWS // group  # queries per tile
        self.packed_rows = self.queries * group  # rows of a tile: its queries x their grouped heads
        self.chunk, self.keys_per_step, self.warps, self.partials = chunk, keys_per_step, warps, partials
        # attend_quantized holds a query's heads as one tile: a power of two of them (16 in every preset)
        self.quantizes_output = (query_heads & (query_heads - 1)) == 0
        self.chunks = -(-cache.max_len // chunk)
        self.chunks_padded = triton.next_power_of_2(self.chunks)  # the merge loads all chunks at once
        self.bounds = torch.zeros(2, dtype=torch.int64, device=cache.device)  # (first slot, prompt length)
        self.planned: tuple[int, int] | None = None
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # query count -> (parts, lse)
        self.active: tuple[torch.Tensor, torch.Tensor] | None = None

    def plan(self, start: int, length: int, shared: int) -> None:
        """Host side, outside any graph: the partial-result buffers of ``length`` queries (kept per query
        count, so a captured launch keeps its pointers) and the prompt length (first slot comes from
        ``prepare``)."""
        if length not in self.buffers:
            tiles = self.cache.rows * -(-length // self.queries)
            shape = (tiles * self.kv_heads * self.chunks * self.packed_rows, self.head_dim)
            parts = torch.empty(shape, dtype=self.partials, device=self.cache.device)
            self.buffers[length] = (parts, torch.empty(shape[0], device=self.cache.device))
        self.active = self.buffers[length]
        if self.planned != (shared, length):
            self.bounds[1].fill_(shared)  # a kernel with the value as argument: no host sync
            self.planned = (shared, length)

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Device side, inside the graph: the forward's first slot into the kernels' bounds."""
        self.bounds[0].copy_(start)

    def _partials(self, layer: int, q: torch.Tensor) -> int:
        # The partial kernel into the active buffers -> query tiles per row.
        partial = _kernels()[0]
        rows, length = q.shape[:2]
        tiles_per_row = -(-length // self.queries)
        parts, lse = self.active
        partial[(self.chunks, self.kv_heads, rows * tiles_per_row)](
            q, self.cache.keys[layer], self.cache.values[layer], self.bounds, parts, lse,
            length, tiles_per_row, self.cache.max_len, 1.0 / math.sqrt(self.head_dim), **self._shape,
            BLOCK=self.block_size, QUERIES=self.queries, KEYS=self.keys_per_step, CHUNK=self.chunk,
            INTERPRETED=self.interpreted, num_warps=self.warps, **launch_options(q.device, rows * length),
        )  # fmt: skip
        return tiles_per_row

    @property
    def _shape(self) -> dict[str, int]:
        return {"QUERY_HEADS": self.query_heads, "KV_HEADS": self.kv_heads, "D": self.head_dim}

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(K, n, Hq, D) queries over layer ``layer``'s cache -> (K, n, Hq * D)."""
        rows, length = q.shape[:2]
        q = q.contiguous()
        out = torch.empty_like(q)
        tiles_per_row = self._partials(layer, q)
        parts, lse = self.active
        _kernels()[1][(rows * tiles_per_row, self.kv_heads, self.packed_rows)](
            parts, lse, out, length, tiles_per_row, self.chunks, **self._shape, QUERIES=self.queries,
            CHUNKS=self.chunks_padded, **launch_options(q.device, rows * length),
        )  # fmt: skip
        return out.view(rows, length, -1)

    def attend_quantized(self, layer: int, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``attend``, its output quantised row by row for the fused FP8 layers in the same kernel:
        (K, n, Hq, D) queries -> (e4m3 (K n, Hq D), fp32 scales (K n, 1)), ``fp8.quantize_rows`` of
        ``attend``'s output."""
        import triton.language as tl

        from wamdiff2_ros.decoding.fp8 import FP8
        from wamdiff2_ros.decoding.fp8_fused import fp8_rows

        rows, length, heads, dim = q.shape
        q = q.contiguous()
        q8, scale = fp8_rows(rows * length, heads * dim, q.device)
        tiles_per_row = self._partials(layer, q)
        parts, lse = self.active
        out_dtype = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}
        _kernels()[2][(rows * length,)](
            parts, lse, q8, scale, length, tiles_per_row, self.chunks, **self._shape,
            QUERIES=self.queries, CHUNKS=self.chunks_padded, OUT_DTYPE=out_dtype[q.dtype], num_warps=8,
            **launch_options(q.device, rows * length),
        )  # fmt: skip
        return q8.to(FP8), scale
