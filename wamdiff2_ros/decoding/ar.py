"""Autoregressive twin decoder: one uncached full forward per token, plain causal mask, no logit shift.

The obviously-right reference for block decoding at B = 1: every token is predicted by a mask slot appended
after the prompt and the answer so far (position i predicts token i, as the WAM-Diff2 B = 1 model is trained),
and the whole sequence is recomputed each time, so no cache or fused order is involved. Slow by design.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedTokenizerBase, Qwen3VLForConditionalGeneration

from wamdiff2_ros.decoding.config import DecodeConfig, DecodeResult
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.result import finish_result
from wamdiff2_ros.decoding.sampling import RowSampling
from wamdiff2_ros.decoding.step import BlockBudget, constrain, denoise_step, step_schedule
from wamdiff2_ros.model.forward import block_causal_hidden, head_logits
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.tokenizer import SpecialIds


@torch.no_grad()
def decode_ar(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    prompt: PromptTensors,
    config: DecodeConfig,
    grammar: TokenGrammar | None = None,
    ids: SpecialIds = SpecialIds(),  # noqa: B008 (frozen dataclass, safe as a default)
) -> DecodeResult:
    """Decode token by token with a full forward each (``config.block_size`` must be 1).

    Args:
        model: the model.
        tokenizer: turns answer tokens into text.
        prompt: the prompt tensors.
        config: decode settings; ``decoder="ar"``, ``block_size=1``.
        grammar: the answer grammar (planning or detection) when ``config.grammar`` is set.
        ids: special token ids.

    Returns:
        The candidates and costs; ``forwards`` is one per answer token, ``steps_per_block`` one per token.
    """
    started = time.perf_counter()
    rows = config.candidates
    sampling = RowSampling.of(config.temperature, config.seed, rows, config.greedy_first)
    schedule = step_schedule(config)
    answer = torch.full((rows, config.max_new_tokens), ids.eos, dtype=torch.int64)
    probabilities = torch.ones(answer.shape, dtype=torch.float32)
    finished = torch.zeros(rows, dtype=torch.bool)
    states = [grammar.start_state] * rows if grammar is not None else None
    mask_slot = torch.full((rows, 1), ids.mask, dtype=torch.int64)
    forwards = 0
    for index in range(config.max_new_tokens):
        response = torch.cat([answer[:, :index], mask_slot], dim=1)
        # Block size 1 makes the block-causal mask plain causal, prompt included.
        hidden = block_causal_hidden(model, prompt, response, 1, logits_to_keep=1)  # (K, 1, H)
        logits = head_logits(model, hidden, grammar.token_ids if grammar is not None else None)
        forwards += 1
        budget = BlockBudget(states=states, limit=1, tokens_after=config.max_new_tokens - index - 1)
        tokens = torch.where(finished[:, None], ids.eos, ids.mask)
        masked = ~finished[:, None]
        logits = constrain(logits, tokens, masked, config, grammar, budget, ids.mask)
        tokens, _, _, probability = denoise_step(
            logits, tokens, masked, 0, config, grammar, budget, sampling, index, schedule
        )
        answer[:, index] = tokens[:, 0]
        probabilities[:, index] = probability[:, 0]
        if states is not None:
            states = [
                grammar.done_state if bool(finished[k]) else grammar.advance(states[k], [int(tokens[k, 0])])
                for k in range(rows)
            ]
        finished |= tokens[:, 0] == ids.eos
        if bool(finished.all()):
            break
    steps = [1] * forwards
    return finish_result(
        tokenizer, answer, probabilities, config, ids.eos, forwards, steps, prompt.length, 0.0, started
    )
