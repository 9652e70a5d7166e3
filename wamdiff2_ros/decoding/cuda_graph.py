"""CUDA graphs, generic: capture any step on static buffers, and replay a forward per query length.

``capture`` is what every graph of the fast path goes through (the device loop's whole steps in
``device_loop.py``, the per-forward graphs of ``ForwardGraphs`` that ``StaticBlockCache`` replays under the
host loop, the prompt prefill's ``ShapeGraphs``). Nothing here knows about decoding.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch


def capture(body: Callable[[], object], pool: tuple[int, int]) -> torch.cuda.CUDAGraph:
    """Run ``body`` once eagerly on a side stream (lazy inits, autotuning), then capture it into a graph.

    Python's collector is held off during the capture: a graph of an earlier engine kept alive only by a
    reference cycle, freed by an automatic collection in the middle of a capture, resets itself there
    ("operation not permitted when stream is capturing"), which invalidates the capture and leaves the
    CUDA generator in capture state (the GPU tests' failure of 2026-12-04, docs/BENCHMARKS.md). Such
    garbage is freed by the next collection after the capture instead (a collection before each capture
    would cost ~0.2 s of warm-up each on the 2-core CPU with a model loaded).

    Args:
        body: work on static buffers; running it twice must be harmless (the warm-up run is real work).
        pool: memory pool shared by graphs that never replay concurrently.

    Returns:
        The captured graph.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    collecting = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph, pool=pool):
            body()
    finally:
        if collecting:
            gc.enable()
    return graph


class ForwardGraphs:
    """Replays ``forward(tokens)`` from one captured graph per query length.

    Args:
        forward: maps (K, n) tokens to (K, n, H) hidden states, reading all other state from static buffers.
    """

    def __init__(self, forward: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.forward = forward
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, list[torch.Tensor]]] = {}

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """Hidden states of ``tokens``: a fresh tensor, so the next replay cannot overwrite it."""
        length = tokens.shape[1]
        if length not in self.graphs:
            static_tokens = tokens.clone()
            out: list[torch.Tensor] = []  # holds the output of the latest capture run

            def body() -> None:
                out[:] = [self.forward(static_tokens)]

            self.graphs[length] = (capture(body, self.pool), static_tokens, out)
        graph, static_tokens, out = self.graphs[length]
        static_tokens.copy_(tokens)
        graph.replay()
        return out[-1].clone()


class ShapeGraphs:
    """Replays ``body(*tensors)`` for its side effects from one captured graph per tuple of argument shapes.

    Each call copies its arguments into the static ones of its shapes' graph, so callers pass fresh tensors.

    Args:
        body: work whose only inputs, besides state read from static buffers, are its tensor arguments.
    """

    def __init__(self, body: Callable[..., object]) -> None:
        self.body = body
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple[torch.Size, ...], tuple[torch.cuda.CUDAGraph, list[torch.Tensor]]] = {}

    def __call__(self, *tensors: torch.Tensor) -> None:
        key = tuple(t.shape for t in tensors)
        if key not in self.graphs:
            static = [t.clone() for t in tensors]
            self.graphs[key] = (capture(lambda: self.body(*static), self.pool), static)
        graph, static = self.graphs[key]
        for buffer, tensor in zip(static, tensors, strict=True):
            buffer.copy_(tensor)
        graph.replay()
