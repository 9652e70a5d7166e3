"""The fast path's vision tower on the CPU: transformers' tower bit for bit in fp32, for several grids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import build_prompt


def _reference(model, prompt):
    features = model.model.get_image_features(prompt.pixel_values, prompt.image_grid_thw)
    return torch.cat(features.pooler_output), [torch.cat(layer) for layer in features.deepstack_features]


@pytest.mark.parametrize("size", [(96, 160), (160, 96), (128, 128)], ids=lambda s: f"{s[1]}x{s[0]}")
def test_lean_vision_equals_transformers_tower_exactly(tiny_model, tokenizer, size):
    pixels = np.random.default_rng(sum(size)).integers(0, 256, size=(*size, 3), dtype=np.uint8)
    prompt = build_prompt(tokenizer, "<image> Plan.", pixels)
    vision = LeanVision(tiny_model)
    with torch.no_grad():
        image, deepstack = _reference(tiny_model, prompt)
    features = vision(prompt.pixel_values, prompt.image_grid_thw)
    assert len(tiny_model.config.vision_config.deepstack_visual_indexes) == len(features.deepstack) > 0
    assert torch.equal(features.image, image)
    for mine, theirs in zip(features.deepstack, deepstack, strict=True):
        assert torch.equal(mine, theirs)


def test_lean_vision_builds_grid_inputs_once_per_grid(tiny_model, tokenizer, front_image):
    vision = LeanVision(tiny_model)
    prompt = build_prompt(tokenizer, "<image> Plan.", front_image)
    first = vision(prompt.pixel_values, prompt.image_grid_thw)
    second = vision(prompt.pixel_values, prompt.image_grid_thw)
    assert len(vision._grids) == 1 and torch.equal(first.image, second.image)


def test_lean_vision_refuses_what_it_does_not_do(tiny_model, tokenizer, front_image):
    with pytest.raises(InputError, match="CUDA"):
        LeanVision(tiny_model, cuda_graph=True)
    prompt = build_prompt(tokenizer, "<image> Plan.", front_image)
    two = prompt.image_grid_thw.repeat(2, 1)
    with pytest.raises(InputError, match="one image"):
        LeanVision(tiny_model)(prompt.pixel_values.repeat(2, 1), two)
