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
so a tile's K/V are loaded once for all of them. With K rows the prompt's keys, which every answer query
sees whole, get a pass of their own whose tiles take every row's queries (128 query rows a tile, against
64 of one row's): each prompt chunk is loaded half as often, in matrix products twice as tall, and
the keys after the prompt take the per-row pass (a forward's two launches, one merge). Predicted, not yet
measured on a GPU. The prompt's own forward goes through FlexAttention (``flex.py``) or FlashInfer:
compute-bound, where these kernels have nothing to add. Triton is imported when a backend is
built; a CPU cache runs under ``TRITON_INTERPRET=1`` (how the tests check it without a GPU).
"""

from __future__ import annotations

import functools
import math
import os
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

# The H200 sweep's choice (docs/BENCHMARKS.md, "Split-keys attention"): chunks of 256 keys, 32 per inner
# step, 4 warps: 12.3 / 16.9 / 40.2 us per layer for 32 / 64 queries / 8 rows of 32, where larger chunks,
# 64 keys per step or 8 warps are level or slower, and bf16 partials slower still.
CHUNK = 256  # keys per program
KEYS_PER_STEP = 32  # keys per inner iteration of a program
PACKED_ROWS = 64  # query rows (queries x grouped heads) per tile
# K rows' prompt pass: tiles of every row's query rows (not yet swept on a GPU; 128 rows, 8 warps keep the
# accumulator at 64 registers a thread)
PROMPT_TILE, PROMPT_WARPS = 128, 8


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def partial(
        q_ptr, k_ptr, v_ptr, bounds_ptr, out_ptr, lse_ptr, n, tiles_per_row, max_len, scale, slots,
        packed_total,
        QUERY_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
        TILE: tl.constexpr, KEYS: tl.constexpr, CHUNK: tl.constexpr, PROMPT: tl.constexpr,
        ANSWER: tl.constexpr, INTERPRETED: tl.constexpr,
    ):  # fmt: skip
        # A program covers its tile's keys in its chunk: all of them (one row's queries; neither flag), the
        # prompt's only (``PROMPT``: tiles over every row's queries, since the K candidate rows see the same
        # prompt) or those after the prompt only (``ANSWER``: one row's queries).
        # Query rows are numbered flat, ``(row * n + query) * group + grouped head``, in the partial buffers
        # (``(KV head, flat row, slot)``), so the two passes of K rows and the merge agree whatever the tiles.
        chunk, head, tile = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        group: tl.constexpr = QUERY_HEADS // KV_HEADS
        start, shared = tl.load(bounds_ptr).to(tl.int32), tl.load(bounds_ptr + 1).to(tl.int32)
        packed = tl.arange(0, TILE)
        if PROMPT:
            row = 0  # the prompt lives in row 0
            flat = tile * TILE + packed
            valid = flat < packed_total
            limit = shared  # every answer query sees the whole prompt: no mask a row
        else:
            row, query_tile = tile // tiles_per_row, tile % tiles_per_row
            query = query_tile * (TILE // group) + packed // group
            valid = query < n
            flat = (row * n + query) * group + packed % group
            limit = tl.where(valid, tl.minimum(start + (query // BLOCK + 1) * BLOCK, start + n), 0)
        # Slots: chunk c's partial, and for K rows one more (the last) for the keys of the chunk that holds
        # the prompt's end past it; each slot has one writer per forward.
        boundary = shared // CHUNK
        low = chunk * CHUNK
        high = tl.minimum(low + CHUNK, limit if PROMPT else tl.max(limit, axis=0))
        slot = chunk
        writes = chunk >= 0
        if PROMPT:
            writes = chunk <= boundary
        if ANSWER:
            low = tl.maximum(low, shared)
            writes = chunk >= boundary
            slot = tl.where(chunk == boundary, slots - 1, chunk)
        token = flat // group  # row * n + query
        dims = tl.arange(0, D)
        q = tl.load(
            q_ptr + (token * QUERY_HEADS + head * group + flat % group)[:, None] * D + dims[None, :],
            mask=valid[:, None] & (low < high),  # programs with no keys load nothing
            other=0.0,
        )
        best = tl.full((TILE,), float("-inf"), tl.float32)
        total = tl.zeros((TILE,), tl.float32)
        accumulator = tl.zeros((TILE, D), tl.float32)
        for first in range(low, high, KEYS):
            keys = first + tl.arange(0, KEYS)
            source = tl.where(keys < shared, 0, row)  # K rows read row 0's prompt
            offsets = ((source * max_len + keys) * KV_HEADS + head)[:, None] * D + dims[None, :]
            inside = keys < high  # past a chunk's end when the answer's keys start inside it
            k = tl.load(k_ptr + offsets, mask=inside[:, None], other=0.0)
            v = tl.load(v_ptr + offsets, mask=inside[:, None], other=0.0)
            if INTERPRETED:  # the interpreter multiplies bf16 operands' raw bits: give it fp32
                scores = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
            else:
                scores = tl.dot(q, tl.trans(k))
            if PROMPT:  # noqa: SIM108 (a constexpr branch: the other one indexes a row vector this lacks)
                visible = inside[None, :]
            else:
                visible = (keys[None, :] < limit[:, None]) & inside[None, :]
            scores = tl.where(visible, scores * scale, float("-inf"))
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
        part = (head * packed_total + flat) * slots + slot
        stored = valid & writes
        tl.store(
            out_ptr + part[:, None] * D + dims[None, :],
            (accumulator / tl.where(seen, total, 1.0)[:, None]).to(out_ptr.dtype.element_ty),
            mask=stored[:, None],
        )
        tl.store(lse_ptr + part, tl.where(seen, best + tl.log(total), float("-inf")), mask=stored)

    @triton.jit
    def merge(
        parts_ptr, lse_ptr, out_ptr, packed_total, slots,
        QUERY_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, SLOTS: tl.constexpr,
    ):  # fmt: skip
        # One program per flat query row and KV head: all its slots in one load (a loop over them is
        # latency-bound); slots that saw no key are not read (their weight is 0).
        flat, head = tl.program_id(0), tl.program_id(1)
        group: tl.constexpr = QUERY_HEADS // KV_HEADS
        slot = tl.arange(0, SLOTS)
        inside = slot < slots
        part = (head * packed_total + flat) * slots + slot
        lse = tl.load(lse_ptr + part, mask=inside, other=float("-inf"))
        best = tl.max(lse, axis=0)
        weights = tl.exp(lse - tl.where(best == float("-inf"), 0.0, best))
        dims = tl.arange(0, D)
        read = (inside & (lse > float("-inf")))[:, None]
        values = tl.load(parts_ptr + part[:, None] * D + dims[None, :], mask=read, other=0.0).to(tl.float32)
        total = tl.sum(weights, axis=0)
        merged = tl.sum(weights[:, None] * values, axis=0) / tl.where(total > 0, total, 1.0)
        token = flat // group  # row * n + query
        tl.store(
            out_ptr + (token * QUERY_HEADS + head * group + flat % group) * D + dims,
            merged.to(out_ptr.dtype.element_ty),
        )

    @triton.jit
    def merge_quant(
        parts_ptr, lse_ptr, q8_ptr, scale_ptr, packed_total, slots,
        QUERY_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, SLOTS: tl.constexpr,
        OUT_DTYPE: tl.constexpr,
    ):  # fmt: skip
        # One program per query, all its heads as one (Hq, D) tile in registers: each head merged as
        # ``merge`` merges it and rounded to the attention's output dtype, then the row quantised to e4m3
        # with one scale, as ``fp8.quantize_rows`` quantises ``attend``'s output: the fused FP8 layers'
        # attention input with no kernel of its own (and no round trip through memory).
        token = tl.program_id(0)  # row * n + query
        group: tl.constexpr = QUERY_HEADS // KV_HEADS
        heads = tl.arange(0, QUERY_HEADS)
        base = ((heads // group) * packed_total + token * group + heads % group) * slots  # (Hq,) slot 0
        slot = tl.arange(0, SLOTS)
        inside = (slot < slots)[None, :]
        lse = tl.load(lse_ptr + base[:, None] + slot[None, :], mask=inside, other=float("-inf"))
        best = tl.max(lse, axis=1)
        best = tl.where(best == float("-inf"), 0.0, best)
        total = tl.sum(tl.exp(lse - best[:, None]), axis=1)
        dims = tl.arange(0, D)
        merged = tl.zeros((QUERY_HEADS, D), tl.float32)
        for index in range(0, slots):
            part = base + index  # (Hq,)
            weight = tl.exp(tl.load(lse_ptr + part) - best)
            values = tl.load(parts_ptr + part[:, None] * D + dims[None, :]).to(tl.float32)
            merged += weight[:, None] * values
        merged = (merged / tl.where(total > 0, total, 1.0)[:, None]).to(OUT_DTYPE).to(tl.float32)
        scale = tl.maximum(tl.math.div_rn(tl.max(tl.max(tl.abs(merged), axis=1), axis=0), 448.0), 1e-12)
        q = tl.minimum(tl.maximum(tl.math.div_rn(merged, scale), -448.0), 448.0)
        offsets = (token * QUERY_HEADS + heads)[:, None] * D + dims[None, :]
        tl.store(q8_ptr + offsets, q.to(q8_ptr.dtype.element_ty))
        tl.store(scale_ptr + token, scale)

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
        shared_tiles: the prompt's keys in a pass of their own, over tiles of every row's queries (None:
            where the cache has more than one row); else each row's tiles read the prompt themselves.
        prompt_tile: query rows per tile of that pass (a power of two).
        prompt_warps: warps per program of that pass.

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
        shared_tiles: bool | None = None,
        prompt_tile: int = PROMPT_TILE,
        prompt_warps: int = PROMPT_WARPS,
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
        self.query_heads, self.kv_heads, self.head_dim, self.group = query_heads, kv_heads, head_dim, group
        self.queries = PACKED_ROWS // group  # queries per tile
        self.packed_rows = self.queries * group  # rows of a tile: its queries x their grouped heads
        self.chunk, self.keys_per_step, self.warps, self.partials = chunk, keys_per_step, warps, partials
        self.shared_tiles = cache.rows > 1 if shared_tiles is None else shared_tiles
        self.prompt_tile, self.prompt_warps = prompt_tile, prompt_warps
        # attend_quantized holds a query's heads as one tile: a power of two of them (16 in every preset)
        self.quantizes_output = (query_heads & (query_heads - 1)) == 0
        self.chunks = -(-cache.max_len // chunk)
        # a partial per chunk, and with a prompt pass one more: the chunk holding the prompt's end has two
        self.slots = self.chunks + int(self.shared_tiles)
        self.slots_padded = triton.next_power_of_2(self.slots)  # the merge loads all slots at once
        self.bounds = torch.zeros(2, dtype=torch.int64, device=cache.device)  # (first slot, prompt length)
        self.planned: tuple[int, int] | None = None
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # query count -> (parts, lse)
        self.active: tuple[torch.Tensor, torch.Tensor] | None = None

    def plan(self, start: int, length: int, shared: int) -> None:
        """Host side, outside any graph: the partial-result buffers of ``length`` queries (kept per query
        count, so a captured launch keeps its pointers) and the prompt length (first slot comes from
        ``prepare``)."""
        if length not in self.buffers:
            shape = (self.kv_heads * self._flat_rows(self.cache.rows, length) * self.slots, self.head_dim)
            parts = torch.empty(shape, dtype=self.partials, device=self.cache.device)
            self.buffers[length] = (parts, torch.empty(shape[0], device=self.cache.device))
        self.active = self.buffers[length]
        if self.planned != (shared, length):
            self.bounds[1].fill_(shared)  # a kernel with the value as argument: no host sync
            self.planned = (shared, length)

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Device side, inside the graph: the forward's first slot into the kernels' bounds."""
        self.bounds[0].copy_(start)

    def _flat_rows(self, rows: int, length: int) -> int:
        return rows * length * self.group  # query rows of a forward: (row, query, grouped head)

    def _partials(self, layer: int, q: torch.Tensor) -> int:
        # The partial kernel(s) into the active buffers -> the forward's flat query rows.
        partial = _kernels()[0]
        rows, length = q.shape[:2]
        flat_rows = self._flat_rows(rows, length)
        tiles_per_row = -(-length // self.queries)
        parts, lse = self.active
        arguments = (
            q, self.cache.keys[layer], self.cache.values[layer], self.bounds, parts, lse, length,
            tiles_per_row, self.cache.max_len, 1.0 / math.sqrt(self.head_dim), self.slots, flat_rows,
        )  # fmt: skip
        constants = {**self._shape, "BLOCK": self.block_size, "KEYS": self.keys_per_step, "CHUNK": self.chunk,
                     "INTERPRETED": self.interpreted}  # fmt: skip
        if self.shared_tiles:
            partial[(self.chunks, self.kv_heads, -(-flat_rows // self.prompt_tile))](
                *arguments, **constants, TILE=self.prompt_tile, PROMPT=True, ANSWER=False,
                num_warps=self.prompt_warps,
            )  # fmt: skip
        partial[(self.chunks, self.kv_heads, rows * tiles_per_row)](
            *arguments, **constants, TILE=self.packed_rows, PROMPT=False, ANSWER=self.shared_tiles,
            num_warps=self.warps,
        )  # fmt: skip
        return flat_rows

    @property
    def _shape(self) -> dict[str, int]:
        return {"QUERY_HEADS": self.query_heads, "KV_HEADS": self.kv_heads, "D": self.head_dim}

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(K, n, Hq, D) queries over layer ``layer``'s cache -> (K, n, Hq * D)."""
        rows, length = q.shape[:2]
        q = q.contiguous()
        out = torch.empty_like(q)
        flat_rows = self._partials(layer, q)
        parts, lse = self.active
        _kernels()[1][(flat_rows, self.kv_heads)](
            parts, lse, out, flat_rows, self.slots, **self._shape, SLOTS=self.slots_padded
        )
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
        flat_rows = self._partials(layer, q)
        parts, lse = self.active
        out_dtype = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}
        _kernels()[2][(rows * length,)](
            parts, lse, q8, scale, flat_rows, self.slots, **self._shape, SLOTS=self.slots_padded,
            OUT_DTYPE=out_dtype[q.dtype], num_warps=8,
        )  # fmt: skip
        return q8.to(FP8), scale
