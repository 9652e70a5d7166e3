"""Answer tokens to ``DecodeResult``: cut at max_new_tokens and at the first <|im_end|>, decode text."""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.decoding.config import Candidate, DecodeConfig, DecodeResult


def finish_result(
    tokenizer: PreTrainedTokenizerBase,
    answer: torch.Tensor,
    config: DecodeConfig,
    eos_id: int,
    forwards: int,
    steps_per_block: list[int],
    prompt_tokens: int,
    prefill_s: float,
    started: float,
) -> DecodeResult:
    """Build the result from the (K, >= max_new_tokens) answer tokens of a decode that began at ``started``.

    The reference leaves tokens after the first <|im_end|> of the last block in place (pitfall 6); every
    token from the first <|im_end|> on is dropped here.
    """
    candidates = []
    for row in range(answer.shape[0]):
        token_ids = answer[row, : config.max_new_tokens].tolist()
        stopped = eos_id in token_ids
        if stopped:
            token_ids = token_ids[: token_ids.index(eos_id)]
        candidates.append(
            Candidate(
                token_ids=tuple(token_ids),
                text=tokenizer.decode(token_ids, skip_special_tokens=True),
                stopped=stopped,
                seed=config.seed + row,
            )
        )
    return DecodeResult(
        candidates=tuple(candidates),
        forwards=forwards,
        steps_per_block=tuple(steps_per_block),
        prompt_tokens=prompt_tokens,
        prefill_s=prefill_s,
        latency_s=time.perf_counter() - started,
    )
