"""FlashInfer attention over the static cache: paged prefill with page size 1, planned outside the graph.

The static cache's rows are (slot, head, dim) arrays, so slot s of row r is page ``r * max_len + s`` of a
paged cache with page size 1 (the layout SGLang uses) and no copy is needed. The K candidate rows share the
prompt: every row's page table points at row 0's prompt pages, so the prompt is stored and read once, not K
times (Fast-dDrive's forked prefix). A forward of n queries per row
is ceil(n / B) "requests" per row, one per B-sized query group (a prompt's last one may be shorter), each
non-causal over the keys below its group's end: the block sees itself whole (``causal=False``; FlashInfer's
causal mask is bottom-right aligned) and, in the fused order, the committed block does not see the new one,
with no custom mask (which would disable FA3). At B = 1 that rule is the causal mask itself, so a forward is
one causal request per row (a 2,106-token prompt was 2,106 requests and 195 ms before). ``plan`` runs on
the host before a replay (it may not be captured); ``run`` is what a CUDA graph holds, on wrappers built
with ``use_cuda_graph=True`` and fixed buffers (flashinfer issue #3904: a graph over a wrapper without it
gives silently wrong output). FlashInfer is imported here only: optional.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's recommended split-k workspace


def kernels(rows: int) -> str:
    """FlashInfer kernel family for a cache of ``rows`` candidates (H200 measurements, docs/BENCHMARKS.md).

    "auto" picks FA3 on Hopper, which does not split the keys: one row's 32 block queries x 8 KV heads then
    occupy a handful of the 132 SMs (37.8 us per layer over 2,138 keys). FA2 splits the keys across SMs, also
    inside CUDA graphs: 15.5 us, a 2.08 instead of 2.74 ms forward. With K = 8 rows FA3 has work enough and
    was the faster (3.11 vs 3.49 ms per forward).
    """
    return "fa2" if rows == 1 else "auto"


def page_table(
    rows: int, max_len: int, block_size: int, start: int, length: int, shared: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's ragged query and page layout of a forward of ``length`` queries per row from ``start``.

    One request per row and B-sized query group; a request sees slots [0, its group's end). Slots below
    ``shared`` are row 0's pages for every row.

    Args:
        rows: K.
        max_len: slots per row (pages per row).
        block_size: B.
        start: first query slot.
        length: queries per row (a prompt's last group may be short).
        shared: prompt slots read from row 0.

    Returns:
        (qo_indptr, kv_indptr, indices), int32 on the host.
    """
    ends = [min(group_start + block_size, length) for group_start in range(0, length, block_size)]
    slots = torch.arange(start + length, dtype=torch.int32)
    pages = [torch.where(slots < shared, slots, row * max_len + slots) for row in range(rows)]
    indices = torch.cat([pages[row][: start + end] for row in range(rows) for end in ends])
    query_lengths = [end - group * block_size for group, end in enumerate(ends)] * rows
    qo_indptr = torch.zeros(len(query_lengths) + 1, dtype=torch.int32)
    qo_indptr[1:] = torch.tensor(query_lengths, dtype=torch.int32).cumsum(0)
    kv_indptr = torch.zeros(len(query_lengths) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.tensor([start + end for end in ends] * rows, dtype=torch.int32).cumsum(0)
    return qo_indptr, kv_indptr, indices


class FlashInferAttention:
    """Paged-prefill attention through ``flashinfer.BatchPrefillWithPagedKVCacheWrapper``.

    Args:
        cache: the static cache (bf16 or fp16; FlashInfer has no fp32 kernels).
        block_size: B, the query group size.
        use_cuda_graph: build wrappers whose ``run`` may be captured.
        query_heads: Hq (a multiple of the cache's Hkv: grouped-query attention).

    Raises:
        ImportError: FlashInfer is not installed (``requirements/gpu.txt``).
        ValueError: the cache is not a CUDA fp16/bf16 cache.
    """

    def __init__(self, cache: StaticKVCache, block_size: int, use_cuda_graph: bool, query_heads: int) -> None:
        import flashinfer

        if cache.device.type != "cuda" or cache.keys.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(
                f"FlashInfer needs a CUDA fp16/bf16 cache, got {cache.keys.dtype} on {cache.device}"
            )
        self.flashinfer = flashinfer
        self.cache = cache
        self.block_size = block_size
        self.use_cuda_graph = use_cuda_graph
        self.query_heads = query_heads
        # Graph mode: a wrapper per query length n (fixed buffers); else one wrapper re-planned for any n.
        self.wrappers: dict[int, Any] = {}
        self.planned: dict[int, tuple[int, int, int]] = {}  # id(wrapper) -> (start, n, shared) of its plan
        self.active: Any = None
        # One split-k workspace for all wrappers: they run one at a time, and a prompt's wrapper per length
        # would otherwise hold 128 MiB each.
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=cache.device)
        # At B = 1 the block-causal rule is the causal one: one causal request per row, not one per token.
        self.causal = block_size == 1

    shares_prompt = True  # rows read row 0's prompt slots: the cache need not copy them

    def _wrapper(self, length: int) -> Any:
        key = length if self.use_cuda_graph else 0
        if key not in self.wrappers:
            requests = self.cache.rows * (1 if self.causal else -(-length // self.block_size))
            device = self.cache.device
            buffers = {}
            if self.use_cuda_graph:  # graph mode: plan() fills these fixed buffers in place
                buffers = {
                    "qo_indptr_buf": torch.empty(requests + 1, dtype=torch.int32, device=device),
                    "paged_kv_indptr_buf": torch.empty(requests + 1, dtype=torch.int32, device=device),
                    "paged_kv_indices_buf": torch.empty(
                        requests * self.cache.max_len, dtype=torch.int32, device=device
                    ),
                    "paged_kv_last_page_len_buf": torch.empty(requests, dtype=torch.int32, device=device),
                }
            family = kernels(self.cache.rows)
            self.wrappers[key] = self.flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_cuda_graph=self.use_cuda_graph, backend=family, **buffers
            )
        return self.wrappers[key]

    def plan(self, start: int, length: int, shared: int) -> None:
        """Plan ``length`` queries per row from slot ``start``, slots below ``shared`` read from row 0 (host
        side; skipped when unchanged)."""
        wrapper = self._wrapper(length)
        self.active = wrapper
        if self.planned.get(id(wrapper)) == (start, length, shared):
            return
        rows, max_len = self.cache.rows, self.cache.max_len
        group = length if self.causal else self.block_size
        qo_indptr, kv_indptr, indices = page_table(rows, max_len, group, start, length, shared)
        _, _, kv_heads, head_dim = self.cache.keys.shape[1:]
        wrapper.plan(
            qo_indptr,
            kv_indptr,
            indices,
            torch.ones(len(kv_indptr) - 1, dtype=torch.int32),  # page size 1: every last page is full
            self.query_heads,
            kv_heads,
            head_dim,
            1,
            causal=self.causal,
            q_data_type=self.cache.keys.dtype,
            kv_data_type=self.cache.keys.dtype,
        )
        self.planned[id(wrapper)] = (start, length, shared)

    def prepare(self, start: torch.Tensor, length: int) -> None:
        """Nothing on the device: the plan already holds the key ranges."""

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """(K, n, Hq, D) queries over layer ``layer``'s cache -> (K, n, Hq * D)."""
        rows, length, heads, head_dim = q.shape
        keys, values = self.cache.keys[layer], self.cache.values[layer]  # (K, max_len, Hkv, D)
        pages = (keys.view(-1, 1, *keys.shape[2:]), values.view(-1, 1, *values.shape[2:]))
        out = self.active.run(q.reshape(rows * length, heads, head_dim), pages)
        return out.view(rows, length, heads * head_dim)
