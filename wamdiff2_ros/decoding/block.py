"""Block-diffusion decoding: the one block loop, and its host step.

Reference: modeling_wam_diff2.py:2143-2580 (docs/REFERENCE.md). Blocks of B tokens start as mask tokens at
the prompt end; each step scores the block over the cache, commits positions by the rule, and the finished
block enters the cache either by one clean forward (``cache_order="reference"``) or inside the first step of
the next block (``"fused"``). B = 1 is autoregressive decoding (no logit shift: the mask slot at position i
predicts token i).

``run_blocks`` owns what every block decoder shares: prefill, the budget of each block, the step cap and the
early exit, the cache write of a finished block, the answer and its result. What a step is, is plugged in:
``HostSteps`` here (grammar and sampling on the host, per row: the CPU path, and the twin) or
``device_loop.DeviceSteps`` (everything on the device, whole steps replayed from CUDA graphs).
"""

from __future__ import annotations

import math
import time
from typing import Protocol

import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.fp8 import answer_logits
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.result import finish_result
from wamdiff2_ros.decoding.sampling import RowSampling
from wamdiff2_ros.decoding.step import BlockBudget, constrain, denoise_step, fill_leftovers, step_schedule
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds


class Steps(Protocol):
    """What ``run_blocks`` needs of a step implementation (the state of K rows over one block)."""

    device: torch.device

    def start(self, seed: int) -> None:
        """A new answer: rows unfinished, grammar at its start, sampler at draw 0 of ``seed``."""

    def start_block(self, limit: int, tokens_after: int) -> None:
        """A new block, all masked (finished rows: <|im_end|>); positions >= limit lie past the budget."""

    def block_committed(self, step: int) -> bool:
        """Before step ``step`` (> 0): is nothing left masked (may read the device)?"""

    def step(self, step: int, count: int | None) -> None:
        """One denoising step committing ``count`` tokens (the schedule's; None: the dynamic rule)."""

    def end_block(self) -> torch.Tensor:
        """Fill what is still masked, advance the grammar; (K, B) the block's final tokens."""

    def block_probabilities(self) -> torch.Tensor:
        """After ``end_block``: (K, B) float32, the probability each of the block's tokens had under the
        constrained logits of the step that committed it (or that filled it at the block's end)."""

    def steps_taken(self) -> int | torch.Tensor:
        """Steps of this block in which some row still had a mask."""

    def all_finished(self) -> bool:
        """Has every row written <|im_end|> (reads the device; raises on a grammar dead end)?"""

    def hold(self, block: torch.Tensor) -> None:
        """Fused order: write ``block`` to the cache inside the next block's first step."""


@torch.no_grad()
def run_blocks(
    cache,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    steps: Steps,
    ids: SpecialIds = SpecialIds(),  # noqa: B008 (frozen dataclass, safe as a default)
) -> DecodeResult:
    """Decode ``config.candidates`` answers to one prompt, block by block.

    Args:
        cache: the KV cache the steps run over (``kv_cache.BlockCache`` or ``static_cache.StaticBlockCache``).
        tokenizer: turns answer tokens into text.
        prompt: the prompt tensors.
        config: decode settings (block size, steps, rule, seed, budget, cache order).
        steps: the step implementation.
        ids: special token ids.

    Returns:
        The candidates (cut at the first <|im_end|> and at max_new_tokens) and the costs.
    """
    started = time.perf_counter()
    size = config.block_size
    schedule = step_schedule(config)
    step_cap = len(schedule) if schedule is not None else config.steps
    num_blocks = math.ceil(config.max_new_tokens / size)
    cache.forwards = 0
    cache.prefill(prompt)
    prefill_s = time.perf_counter() - started
    answer = torch.full(
        (config.candidates, num_blocks * size), ids.eos, dtype=torch.int64, device=steps.device
    )
    probabilities = torch.ones(answer.shape, dtype=torch.float32, device=steps.device)
    steps.start(config.seed)
    steps_per_block = []
    for block_index in range(num_blocks):
        start = block_index * size
        steps.start_block(
            min(size, config.max_new_tokens - start), max(0, config.max_new_tokens - start - size)
        )
        for step in range(step_cap):
            if step > 0 and steps.block_committed(step):
                break
            steps.step(step, None if schedule is None else schedule[step])
        tokens = steps.end_block()
        steps_per_block.append(steps.steps_taken())
        answer[:, start : start + size] = tokens
        probabilities[:, start : start + size] = steps.block_probabilities()
        if block_index == num_blocks - 1 or steps.all_finished():
            break  # no later block reads the cache: skip the write (the reference skips it once all finish)
        if config.cache_order == "fused":
            steps.hold(tokens)
        else:
            cache.write(tokens)
    return finish_result(
        tokenizer,
        answer.cpu(),
        probabilities.cpu(),
        config,
        ids.eos,
        cache.forwards,
        [int(s) for s in steps_per_block],
        prompt.length,
        prefill_s,
        started,
    )


class HostSteps:
    """Steps with the grammar and the commit repair on the host, row by row (``step.py``).

    Args:
        model: the model (its LM head; block state lives on its device).
        cache: the cache to denoise over.
        config: decode settings.
        grammar: the answer grammar when ``config.grammar`` is set, else None.
        ids: special token ids.
    """

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        cache,
        config: DecodeConfig,
        grammar: TokenGrammar | None,
        ids: SpecialIds = SpecialIds(),  # noqa: B008 (frozen dataclass, safe as a default)
    ) -> None:
        self.model, self.cache, self.config, self.grammar, self.ids = model, cache, config, grammar, ids
        self.device = model.device  # CPU in the tests, the GPU otherwise
        self.rows = config.candidates
        self.columns = grammar.token_ids if grammar is not None else None  # score only what it can emit

    def start(self, seed: int) -> None:
        rows = self.rows
        self.sampling = RowSampling.of(
            self.config.temperature, seed, rows, self.config.greedy_first, self.device
        )
        self.draws = 0  # denoising steps taken: the sampler's draw number
        self.finished = torch.zeros(rows, dtype=torch.bool, device=self.device)
        self.states = [self.grammar.start_state] * rows if self.grammar is not None else None
        self.pending: torch.Tensor | None = None  # committed block not yet in the cache (fused order)

    def start_block(self, limit: int, tokens_after: int) -> None:
        rows, size = self.rows, self.config.block_size
        self.budget = BlockBudget(states=self.states, limit=limit, tokens_after=tokens_after)
        # Finished rows carry <|im_end|> and take no commits (reference :2351-2352).
        self.tokens = (
            torch.where(self.finished[:, None], self.ids.eos, self.ids.mask).expand(rows, size).clone()
        )
        self.masked = ~self.finished[:, None].expand(rows, size).clone()
        self.probability = torch.ones(rows, size, dtype=torch.float32, device=self.device)
        self.taken = 0

    def block_committed(self, step: int) -> bool:
        return not bool(self.masked.any())

    def step(self, step: int, count: int | None) -> None:
        if self.pending is not None:
            hidden = self.cache.write_and_denoise(self.pending, self.tokens)
            self.pending = None
        else:
            hidden = self.cache.denoise(self.tokens)
        logits = answer_logits(self.model, hidden, self.columns, self.cache.fp8_head)  # (K, B, C)
        self.logits = constrain(
            logits, self.tokens, self.masked, self.config, self.grammar, self.budget, self.ids.mask
        )
        schedule = None if count is None else [count]
        before = self.masked
        self.tokens, self.masked, self.x0, self.x0_probability = denoise_step(
            self.logits,
            self.tokens,
            self.masked,
            0,
            self.config,
            self.grammar,
            self.budget,
            self.sampling,
            self.draws,
            schedule,
        )
        self.probability = torch.where(before & ~self.masked, self.x0_probability, self.probability)
        self.taken += 1
        self.draws += 1

    def end_block(self) -> torch.Tensor:
        tokens = self.tokens
        if bool(self.masked.any()):
            tokens, filled = fill_leftovers(
                self.logits, self.x0, self.x0_probability, tokens, self.masked, self.grammar, self.budget
            )
            self.probability = torch.where(self.masked, filled, self.probability)
        if self.states is not None:
            self.states = [
                self.grammar.done_state
                if bool(self.finished[k])
                else self.grammar.advance(s, tokens[k].tolist())
                for k, s in enumerate(self.states)
            ]
        self.finished |= (tokens == self.ids.eos).any(-1)
        return tokens

    def block_probabilities(self) -> torch.Tensor:
        return self.probability

    def steps_taken(self) -> int:
        return self.taken

    def all_finished(self) -> bool:
        return bool(self.finished.all())

    def hold(self, block: torch.Tensor) -> None:
        self.pending = block


def decode_block(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    grammar: TokenGrammar | None = None,
    ids: SpecialIds = SpecialIds(),  # noqa: B008 (frozen dataclass, safe as a default)
    cache=None,
) -> DecodeResult:
    """Decode ``config.candidates`` answers to one prompt by block diffusion, stepping on the host.

    Args:
        model: the model.
        tokenizer: turns answer tokens into text.
        prompt: the prompt tensors.
        config: decode settings (block size, steps, rule, temperature, seed, budget, cache order).
        grammar: the answer grammar (planning or detection) when ``config.grammar`` is set.
        ids: special token ids.
        cache: a cache with ``BlockCache``'s methods and ``fp8_head`` to decode over (the fast path passes a
            ``static_cache.StaticBlockCache`` for this B and K); a fresh ``BlockCache`` when None.

    Returns:
        The candidates (cut at the first <|im_end|> and at max_new_tokens) and the costs.
    """
    cache = cache if cache is not None else BlockCache(model, config.block_size, config.candidates)
    return run_blocks(cache, tokenizer, prompt, config, HostSteps(model, cache, config, grammar, ids), ids)
