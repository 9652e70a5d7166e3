"""One uncached forward of [prompt | response] under the block-causal mask, and the LM head.

The uncached forward is the reference every KV-cache path is tested against; the head can score all
vocabulary columns or only some (the grammar's), and always answers in full-vocabulary ids (a reduced
vocabulary, ``model/vocab.py``, scores its own rows and leaves every other id at -inf).
"""

from __future__ import annotations

import torch
from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.model.masks import inference_mask
from wamdiff2_ros.model.positions import prompt_positions, response_positions
from wamdiff2_ros.model.prompt import PromptTensors
from wamdiff2_ros.model.vocab import FULL_VOCAB, kept_embedding


def head_logits(
    model: Qwen3VLForConditionalGeneration, hidden: torch.Tensor, token_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """LM-head logits of final hidden states, for the whole vocabulary or only the columns ``token_ids``.

    Scoring only the tokens a grammar allows skips almost all of the 151,936-column head; softmax over those
    columns equals the full softmax with every other token at -inf.

    Args:
        model: the model (its ``lm_head``).
        hidden: (K, n, H) final hidden states (after the last norm).
        token_ids: (C,) vocabulary ids to score, or None for all.

    Returns:
        (K, n, V or C) float32 logits.
    """
    weight = model.lm_head.weight
    kept = kept_embedding(model)
    if kept is None:
        if token_ids is not None:
            weight = weight[token_ids.to(weight.device)]
        return torch.nn.functional.linear(hidden, weight).float()
    # A reduced vocabulary scores its rows; every other id is -inf (it can never be chosen).
    if token_ids is None:
        logits = hidden.new_full((*hidden.shape[:-1], FULL_VOCAB), float("-inf"), dtype=torch.float32)
        logits[..., kept.kept] = torch.nn.functional.linear(hidden, weight).float()
        return logits
    token_ids = token_ids.to(weight.device)
    logits = torch.nn.functional.linear(hidden, weight[kept.rows[token_ids]]).float()
    return logits.masked_fill(~kept.is_kept[token_ids], float("-inf"))


@torch.no_grad()
def block_causal_hidden(
    model: Qwen3VLForConditionalGeneration,
    prompt: PromptTensors,
    response_ids: torch.Tensor,
    block_size: int,
    logits_to_keep: int = 0,
) -> torch.Tensor:
    """Final hidden states of the response positions from one full forward (no cache, no logit shift).

    Args:
        model: the model.
        prompt: the prompt (batch of one; repeated for every response row).
        response_ids: (K, R) int64 response tokens (mask ids allowed).
        block_size: B of the block-causal mask (prompt chunked from position 0).
        logits_to_keep: score only the last this many positions (0 = all R).

    Returns:
        (K, R or logits_to_keep, H) final hidden states; through ``head_logits`` position i scores token i.
    """
    rows, response_len = response_ids.shape
    device = model.device
    input_ids = torch.cat([prompt.input_ids.expand(rows, -1).to(device), response_ids.to(device)], dim=1)
    total = input_ids.shape[1]
    mm = torch.zeros_like(input_ids, dtype=torch.int32)
    mm[:, : prompt.length] = prompt.mm_token_type_ids.to(device)
    positions, delta = prompt_positions(model, prompt)
    positions = torch.cat(
        [positions.expand(3, rows, -1), response_positions(prompt.length, delta, 0, response_len, rows)],
        dim=-1,
    )
    vision = {}
    if prompt.pixel_values is not None:
        vision = {
            "pixel_values": prompt.pixel_values.to(device, model.dtype).repeat(rows, 1),
            "image_grid_thw": prompt.image_grid_thw.to(device).repeat(rows, 1),
        }
    out = model.model(
        input_ids=input_ids,
        mm_token_type_ids=mm,
        position_ids=positions.to(device),
        attention_mask=inference_mask(prompt.length, total, block_size, batch=rows).to(device),
        use_cache=False,
        **vision,
    )
    return out.last_hidden_state[:, -(logits_to_keep or response_len) :]


@torch.no_grad()
def block_causal_logits(
    model: Qwen3VLForConditionalGeneration,
    prompt: PromptTensors,
    response_ids: torch.Tensor,
    block_size: int,
    logits_to_keep: int = 0,
) -> torch.Tensor:
    """(K, R or logits_to_keep, V) float32 logits of ``block_causal_hidden`` (same arguments)."""
    return head_logits(model, block_causal_hidden(model, prompt, response_ids, block_size, logits_to_keep))
