"""Images are resized within the reference pixel budget in 32 px steps and patchified for the vision tower."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.image import MAX_PIXELS, MIN_PIXELS, prepare_image, smart_resize


@pytest.mark.parametrize(
    ("source_hw", "target_hw"),
    [
        pytest.param((1080, 1920), (1056, 1920), id="navsim-frame-1980-tokens"),
        pytest.param((96, 128), (128, 160), id="small-upscaled-to-min-pixels"),
        pytest.param((4000, 6000), (1152, 1760), id="large-downscaled-to-max-pixels"),
        pytest.param((448, 800), (448, 800), id="already-on-the-grid"),
        # qwen-vl-utils keeps a side that rounds to 0 at one token (transformers' copy of the rule does not).
        pytest.param((8, 401), (32, 416), id="thin-side-kept-at-one-token"),
    ],
)
def test_smart_resize_examples(source_hw, target_hw):
    assert smart_resize(*source_hw) == target_hw


@settings(max_examples=200, deadline=None)
@given(st.integers(17, 5000), st.integers(17, 5000))  # sides that round to at least one 32 px step
def test_resized_sides_are_multiples_of_32_within_budget(height, width):
    if max(height, width) / min(height, width) > 200:
        return
    h, w = smart_resize(height, width)
    assert h % 32 == 0 and w % 32 == 0
    assert MIN_PIXELS <= h * w <= MAX_PIXELS
    # An independent implementation: transformers' copy of the same qwen-vl-utils rule.
    assert (h, w) == hf_smart_resize(height, width, factor=32, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def test_prepare_image_gives_one_token_per_32_px(front_image):
    vision = prepare_image(front_image)
    assert vision.resized_hw_px == (128, 160)
    assert vision.image_grid_thw.tolist() == [[1, 8, 10]]
    assert vision.num_tokens == (128 // 32) * (160 // 32)
    assert tuple(vision.pixel_values.shape) == (8 * 10, 3 * 2 * 16 * 16)
    assert float(vision.pixel_values.min()) >= -1.0 and float(vision.pixel_values.max()) <= 1.0


@pytest.mark.parametrize(
    ("image", "message"),
    [
        pytest.param(np.zeros((10, 10), np.uint8), "RGB array", id="grayscale"),
        pytest.param(np.zeros((10, 10, 3), np.float32), "uint8", id="float"),
        pytest.param(np.zeros((2, 500, 3), np.uint8), "aspect ratio", id="too-elongated"),
        pytest.param(np.zeros((0, 5, 3), np.uint8), "positive size", id="empty"),
    ],
)
def test_unusable_image_is_an_input_error(image, message):
    with pytest.raises(InputError, match=message):
        prepare_image(image)
