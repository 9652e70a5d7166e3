"""M-RoPE position ids: the prompt's from transformers' ``get_rope_index``, the response's as index + delta.

Positions are always passed explicitly: with a 4D mask, transformers would otherwise try to derive them
from the mask and fail (docs/REFERENCE.md §6.2).
"""

from __future__ import annotations

import torch
from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.model.prompt import PromptTensors


def prompt_positions(
    model: Qwen3VLForConditionalGeneration, prompt: PromptTensors
) -> tuple[torch.Tensor, int]:
    """M-RoPE positions of the prompt and the offset that continues them.

    Args:
        model: the Qwen3-VL model (its ``get_rope_index`` knows the vision merge size).
        prompt: the prompt tensors.

    Returns:
        (positions (3, 1, P) int64, rope_delta) where a text token at absolute index i >= P has position
        ``i + rope_delta`` on all three axes (reference modeling_wam_diff2.py:2211-2217).
    """
    if prompt.image_grid_thw is None:
        positions = torch.arange(prompt.length).view(1, 1, -1).expand(3, 1, -1)
        return positions.to(prompt.input_ids.device), 0
    positions, deltas = model.model.get_rope_index(
        prompt.input_ids, prompt.mm_token_type_ids, image_grid_thw=prompt.image_grid_thw
    )
    return positions, int(deltas.reshape(-1)[0])


def response_positions(
    prompt_len: int, rope_delta: int, start: int, length: int, batch: int = 1
) -> torch.Tensor:
    """(3, batch, length) positions of response tokens ``[start, start + length)`` (0 = first answer
    token)."""
    index = torch.arange(prompt_len + start, prompt_len + start + length) + rope_delta
    return index.view(1, 1, -1).expand(3, batch, -1)


def training_positions(prefix_and_clean: torch.Tensor, response_len: int) -> torch.Tensor:
    """Positions of [prefix | clean | noisy] from [prefix | clean]; the noisy copy reuses the clean ones.

    Args:
        prefix_and_clean: (3, batch, P + R) positions from ``get_rope_index`` over prefix and clean response.
        response_len: R.

    Returns:
        (3, batch, P + 2R) (reference collate_fns.py:1242-1253).
    """
    clean = prefix_and_clean[..., prefix_and_clean.shape[-1] - response_len :]
    return torch.cat([prefix_and_clean, clean], dim=-1)
