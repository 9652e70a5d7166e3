"""Block-diffusion decoder: prefill, denoising steps per block over the exact KV cache, commit, cache write.

Reference: modeling_wam_diff2.py:2143-2580 (shared/research/wamdiff2_reference.md §2). Blocks of B tokens
start as mask tokens at the prompt end; each step scores the block over the cache, commits positions by the
rule, and the finished block enters the cache either by one clean forward (``cache_order="reference"``) or
inside the first step of the next block (``"fused"``). B = 1 is autoregressive decoding (no logit shift:
the mask slot at position i predicts token i).
"""

from __future__ import annotations

import math
import time

import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.result import finish_result
from wamdiff2_ros.decoding.sampling import RowSampling
from wamdiff2_ros.decoding.step import BlockBudget, constrain, denoise_step, fill_leftovers, step_schedule
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds


@torch.no_grad()
def decode_block(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    grammar: TokenGrammar | None = None,
    ids: SpecialIds = SpecialIds(),  # noqa: B008 (frozen dataclass, safe as a default)
    cache: BlockCache | None = None,
) -> DecodeResult:
    """Decode ``config.candidates`` answers to one prompt by block diffusion.

    Args:
        model: the model.
        tokenizer: turns answer tokens into text.
        prompt: the prompt tensors.
        config: decode settings (block size, steps, rule, temperature, seed, budget, cache order).
        grammar: the answer grammar (planning or detection) when ``config.grammar`` is set.
        ids: special token ids.
        cache: a cache with ``BlockCache``'s methods to decode over (the fast path passes a
            ``static_cache.StaticBlockCache`` for this B and K); a fresh ``BlockCache`` when None.

    Returns:
        The candidates (cut at the first <|im_end|> and at max_new_tokens) and the costs.
    """
    started = time.perf_counter()
    rows, size = config.candidates, config.block_size
    schedule = step_schedule(config)
    step_cap = len(schedule) if schedule is not None else config.steps
    num_blocks = math.ceil(config.max_new_tokens / size)
    columns = grammar.token_ids if grammar is not None else None  # score only what the grammar can emit
    cache = cache if cache is not None else BlockCache(model, size, rows)
    cache.prefill(prompt)
    prefill_s = time.perf_counter() - started
    device = model.device  # block state lives beside the logits (CPU in the tests, the GPU otherwise)
    sampling = RowSampling.of(config.temperature, config.seed, rows, config.greedy_first, device)
    draws = 0  # denoising steps taken: the sampler's draw number
    answer = torch.full((rows, num_blocks * size), ids.eos, dtype=torch.int64, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    states = [grammar.start_state] * rows if grammar is not None else None
    pending: torch.Tensor | None = None  # committed block not yet in the cache (fused order)
    steps_per_block: list[int] = []
    for block_index in range(num_blocks):
        start = block_index * size
        budget = BlockBudget(
            states=states,
            limit=min(size, config.max_new_tokens - start),
            tokens_after=max(0, config.max_new_tokens - start - size),
        )
        # Finished rows carry <|im_end|> and take no commits (reference :2351-2352).
        tokens = torch.where(finished[:, None], ids.eos, ids.mask).expand(rows, size).clone()
        masked = ~finished[:, None].expand(rows, size).clone()
        steps = 0
        while bool(masked.any()) and steps < step_cap:
            if pending is not None:
                hidden = cache.write_and_denoise(pending, tokens)
                pending = None
            else:
                hidden = cache.denoise(tokens)
            logits = head_logits(model, hidden, columns)  # (K, B, C)
            logits = constrain(logits, tokens, masked, config, grammar, budget, ids.mask)
            tokens, masked, x0 = denoise_step(
                logits, tokens, masked, steps, config, grammar, budget, sampling, draws, schedule
            )
            steps += 1
            draws += 1
        if bool(masked.any()):
            tokens = fill_leftovers(logits, x0, tokens, masked, grammar, budget)
        steps_per_block.append(steps)
        answer[:, start : start + size] = tokens
        if states is not None:
            states = [
                grammar.done_state if bool(finished[k]) else grammar.advance(states[k], tokens[k].tolist())
                for k in range(rows)
            ]
        finished |= (tokens == ids.eos).any(-1)
        if block_index == num_blocks - 1 or bool(finished.all()):
            break  # no later block reads the cache: skip the write (the reference skips it once all finish)
        if config.cache_order == "fused":
            pending = tokens
        else:
            cache.write(tokens)
    return finish_result(
        tokenizer,
        answer.cpu(),
        config,
        ids.eos,
        cache.forwards,
        steps_per_block,
        prompt.length,
        prefill_s,
        started,
    )
