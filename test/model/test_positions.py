"""Answer positions continue the prompt's M-RoPE positions; the noisy copy reuses the clean positions."""

from __future__ import annotations

import torch

from wamdiff2_ros.model.positions import prompt_positions, response_positions, training_positions


def test_response_positions_equal_get_rope_index_over_the_whole_sequence(tiny_model, planning_prompt):
    answer = torch.full((1, 10), 15)  # text tokens after the prompt
    input_ids = torch.cat([planning_prompt.input_ids, answer], dim=1)
    mm = torch.cat([planning_prompt.mm_token_type_ids, torch.zeros_like(answer, dtype=torch.int32)], dim=1)
    full, _ = tiny_model.model.get_rope_index(input_ids, mm, image_grid_thw=planning_prompt.image_grid_thw)
    prompt, delta = prompt_positions(tiny_model, planning_prompt)
    assert torch.equal(prompt, full[..., : planning_prompt.length])
    assert torch.equal(
        response_positions(planning_prompt.length, delta, 0, 10), full[..., planning_prompt.length :]
    )
    assert delta < 0  # 20 image tokens take a 4x5 grid of positions, so text after them shifts back


def test_noisy_copy_reuses_clean_positions():
    prefix_and_clean = torch.arange(14).view(1, 1, -1).expand(3, 2, -1)
    positions = training_positions(prefix_and_clean, 4)
    assert positions.shape == (3, 2, 18)
    assert torch.equal(positions[..., 14:], positions[..., 10:14])
