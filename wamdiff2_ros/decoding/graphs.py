"""CUDA graphs for the fast decoder: one graph per forward shape, and the fixed-step block loop, no host sync.

``ForwardGraphs`` replays a captured forward (used by ``StaticBlockCache`` under the ordinary block loop,
which keeps its host-side grammar and sampling). ``decode_graphed`` captures whole denoising steps (forward,
LM head, mask suppression, greedy x0, commit rule) and replays them S times per block without reading anything
back; the host syncs once per block (has every row finished?) and, for the dynamic rule, every ``sync_every``
steps (early exit). Steps after a block is fully committed change nothing, so tokens equal the eager ones.
Greedy and grammar-free only: the grammar automaton and per-row generators live on the host.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.fast_model import compiled
from wamdiff2_ros.decoding.result import finish_result
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.decoding.step import BlockBudget, constrain, denoise_step, step_schedule
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds


def capture(body: Callable[[], object], pool: tuple[int, int]) -> torch.cuda.CUDAGraph:
    """Run ``body`` once eagerly on a side stream (lazy inits, autotuning), then capture it into a graph.

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
    with torch.cuda.graph(graph, pool=pool):
        body()
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


def step_tail(
    model: torch.nn.Module,
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    config: DecodeConfig,
    budget: BlockBudget,
    mask_id: int,
    count: int | None,
) -> tuple[torch.Tensor, ...]:
    """The rest of a greedy, grammar-free denoising step after the forward (a pure function, so that it
    compiles: Inductor 2.13 fails on the in-place buffer updates fused in).

    Args:
        model: the model (its LM head).
        hidden: (K, B, H) final hidden states of the block.
        tokens: (K, B) block tokens.
        masked: (K, B) bool, positions still masked.
        config: decode settings (rule, threshold, mask suppression).
        budget: the grammar-free placeholder budget.
        mask_id: the mask token id.
        count: tokens to commit this step (static, sequential), None for the dynamic rule.

    Returns:
        (tokens, masked, x0) after the step and () int64: 1 if some position was masked before it, else 0.
    """
    logits = constrain(head_logits(model, hidden), tokens, masked, config, None, budget, mask_id)  # (K, B, V)
    schedule = None if count is None else [count]
    return *denoise_step(logits, tokens, masked, 0, config, None, budget, None, schedule), masked.any().long()


class StepGraphs:
    """Whole denoising steps captured per (fused first step?, tokens committed this step).

    State lives in static buffers: ``tokens``/``masked`` (K, B) are updated in place by every replay,
    ``pending`` (K, B) holds the previous block for the fused first step, ``x0`` the last step's candidates,
    ``steps`` counts the steps in which some row still had a mask (the eager loop's step count).
    """

    def __init__(self, cache: StaticBlockCache, config: DecodeConfig, ids: SpecialIds) -> None:
        device = cache.model.device
        shape = (cache.rows, cache.block_size)
        self.cache, self.config, self.ids = cache, config, ids
        self.tokens = torch.full(shape, ids.mask, dtype=torch.int64, device=device)
        self.masked = torch.ones(shape, dtype=torch.bool, device=device)
        self.pending = torch.full(shape, ids.eos, dtype=torch.int64, device=device)
        self.x0 = torch.zeros(shape, dtype=torch.int64, device=device)
        self.steps = torch.zeros((), dtype=torch.int64, device=device)
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple[bool, int | None], torch.cuda.CUDAGraph] = {}
        # Grammar-free steps read no budget; one placeholder serves every step.
        self.budget = BlockBudget(states=None, limit=cache.block_size, tokens_after=0)
        # Compiled, a step's head, softmax, argmax and commit rule take a few kernels instead of dozens.
        self.tail = compiled(step_tail) if cache.decoder.compile else step_tail

    def _body(self, fused: bool, count: int | None) -> None:
        if fused:
            hidden = self.cache.raw_forward(torch.cat([self.pending, self.tokens], dim=1))[
                :, self.tokens.shape[1] :
            ]
        else:
            hidden = self.cache.raw_forward(self.tokens)
        tokens, masked, x0, counted = self.tail(
            self.cache.model, hidden, self.tokens, self.masked, self.config, self.budget, self.ids.mask, count
        )
        self.steps.add_(counted)
        self.tokens.copy_(tokens)
        self.masked.copy_(masked)
        self.x0.copy_(x0)

    def replay(self, fused: bool, count: int | None) -> None:
        """Run one step (capturing its graph on first use); ``place`` must have been called for its shape."""
        key = (fused, count)
        if key not in self.graphs:
            self.graphs[key] = capture(lambda: self._body(fused, count), self.pool)
            return  # the capture's warm-up run was this step
        self.graphs[key].replay()


@torch.no_grad()
def decode_graphed(
    cache: StaticBlockCache,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    step_graphs: StepGraphs | None = None,
    sync_every: int = 4,
) -> DecodeResult:
    """Greedy, grammar-free block decoding with every denoising step replayed from a CUDA graph.

    Args:
        cache: a ``StaticBlockCache`` built with ``cuda_graphs=True`` for this config's B and K.
        tokenizer: turns answer tokens into text.
        prompt: the prompt tensors.
        config: decode settings (temperature 0, no grammar).
        step_graphs: graphs captured by an earlier call with the same cache and config (reused when given).
        sync_every: dynamic rule only: steps between host checks for a fully committed block.

    Returns:
        The same candidates and per-block step counts as the eager block decoder; ``forwards`` counts the
        forwards actually run (steps after a block is complete included).

    Raises:
        ValueError: sampling or grammar asked for.
    """
    if config.temperature != 0.0 or config.grammar:
        raise ValueError("the graphed loop is greedy and grammar-free; use the block decoder otherwise")
    started = time.perf_counter()
    ids = SpecialIds()
    graphs = step_graphs or StepGraphs(cache, config, ids)
    size, rows = config.block_size, config.candidates
    schedule = step_schedule(config)
    step_cap = len(schedule) if schedule is not None else config.steps
    num_blocks = math.ceil(config.max_new_tokens / size)
    cache.prefill(prompt)
    prefill_s = time.perf_counter() - started
    device = cache.model.device
    answer = torch.full((rows, num_blocks * size), ids.eos, dtype=torch.int64, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    steps_per_block: list[torch.Tensor] = []
    fused_next = False
    for block_index in range(num_blocks):
        start = block_index * size
        graphs.tokens.copy_(torch.where(finished[:, None], ids.eos, ids.mask).expand(rows, size))
        graphs.masked.copy_(~finished[:, None].expand(rows, size))
        graphs.steps.zero_()
        for step in range(step_cap):
            fused = fused_next and step == 0
            cache.place(2 * size if fused else size)
            graphs.replay(fused, None if schedule is None else schedule[step])
            cache.forwards += 1
            if fused:
                cache.written += size
            if schedule is None and (step + 1) % sync_every == 0 and not bool(graphs.masked.any()):
                break
        tokens = torch.where(graphs.masked, graphs.x0, graphs.tokens)  # leftovers at the step cap
        steps_per_block.append(graphs.steps.clone())
        answer[:, start : start + size] = tokens
        finished |= (tokens == ids.eos).any(-1)
        if block_index == num_blocks - 1 or bool(finished.all()):  # the one sync of every block
            break
        if config.cache_order == "fused":
            graphs.pending.copy_(tokens)
            fused_next = True
        else:
            cache.write(tokens)
    return finish_result(
        tokenizer,
        answer.cpu(),
        config,
        ids.eos,
        cache.forwards,
        [int(s) for s in steps_per_block],
        prompt.length,
        prefill_s,
        started,
    )
