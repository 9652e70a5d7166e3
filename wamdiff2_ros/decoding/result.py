"""Answer tokens to ``DecodeResult``: cut at max_new_tokens and at the first <|im_end|>, decode text."""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.decoding.config import Candidate, DecodeConfig, DecodeResult
from wamdiff2_ros.model.parse import grounding_item_scores
from wamdiff2_ros.model.tokenizer import token_texts


def finish_result(
    tokenizer: PreTrainedTokenizerBase,
    answer: torch.Tensor,
    probabilities: torch.Tensor,
    config: DecodeConfig,
    eos_id: int,
    forwards: int,
    steps_per_block: list[int],
    prompt_tokens: int,
    prefill_s: float,
    started: float,
) -> DecodeResult:
    """Build the result from the (K, >= max_new_tokens) answer tokens of a decode that began at ``started``
    and their probabilities (the same shape: ``block.Steps.block_probabilities``).

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
                token_probabilities=tuple(probabilities[row, : len(token_ids)].tolist()),
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


def grounding_scores(tokenizer: PreTrainedTokenizerBase, candidate: Candidate) -> list[float] | None:
    """A detection answer's confidence in each of its items (``model.parse.grounding_item_scores``, from the
    candidate's token probabilities); None when they cannot be mapped to its text."""
    pieces = token_texts(tokenizer, candidate.token_ids)
    return grounding_item_scores(candidate.text, pieces, candidate.token_probabilities)
