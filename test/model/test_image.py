"""Images are resized within the reference pixel budget in 32 px steps and patchified for the vision tower."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model import image as image_module
from wamdiff2_ros.model.image import (
    MAX_PIXELS,
    MIN_PIXELS,
    QWEN3_VL_MEAN,
    QWEN3_VL_STD,
    RESIZE_REDUCING_GAP,
    VisionInputs,
    _resize_in_bands,
    prepare_image,
    prepare_image_tensor,
    smart_resize,
)
from wamdiff2_ros.model.prompt import build_planning_prompt

SMALL_MAX_PIXELS = 12_544  # 128x64, the bundled model's until 2026-12-04: 16:9 frames shrink 5x and more
# The tensor path against the PIL path, in uint8 levels, measured over the resize cases below (seeds 0-3 for
# the noise): max 2 (noise, 128x96 upscaled), else 1; mean up to 0.0084 on noise and 0.042 on the gradient
# (1280x720 at 12,544). The tolerances sit a little above.
MAX_LEVELS_APART = 3
MEAN_LEVELS_APART = 0.06


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


def _noise(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Seeded uniform noise: the worst case for differences between resampling implementations."""
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _gradient(height: int, width: int) -> np.ndarray:
    """A smooth image: ramps in red and green, a diagonal wave in blue."""
    y, x = np.mgrid[0:height, 0:width]
    wave = 127.5 + 127.5 * np.sin(2 * np.pi * (x / width + y / height))
    rgb = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1), wave], axis=-1)
    return rgb.round().astype(np.uint8)


def _levels(vision: VisionInputs) -> torch.Tensor:
    """The uint8 levels behind the normalised pixel values, per patch and channel."""
    values = vision.pixel_values.reshape(vision.pixel_values.shape[0], 3, -1)
    mean = torch.tensor(QWEN3_VL_MEAN)[:, None]
    std = torch.tensor(QWEN3_VL_STD)[:, None]
    return (values * std + mean).mul(255).round().to(torch.int16)


@pytest.mark.parametrize("make_image", [_noise, _gradient], ids=["noise", "gradient"])
@pytest.mark.parametrize("source_hw", [(448, 800), (128, 160)], ids=["448x800", "128x160"])
def test_both_paths_patchify_as_the_image_processor(make_image, source_hw):
    # Already on the 32 px grid within the budget: neither path resizes, so the values must be bit-equal to
    # transformers' processor (its resize off, Qwen3-VL's mean and std).
    assert smart_resize(*source_hw) == source_hw
    image = make_image(*source_hw)
    processor = Qwen2VLImageProcessorPil(
        do_resize=False,
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=list(QWEN3_VL_MEAN),
        image_std=list(QWEN3_VL_STD),
    )
    expected = processor(images=[Image.fromarray(image)], return_tensors="pt")
    for vision in (prepare_image(image, exact=True), prepare_image_tensor(torch.from_numpy(image))):
        assert vision.pixel_values.dtype == torch.float32
        assert torch.equal(vision.pixel_values, expected["pixel_values"])
        assert vision.image_grid_thw.dtype == torch.int64 and vision.image_grid_thw.device.type == "cpu"
        assert torch.equal(vision.image_grid_thw, expected["image_grid_thw"])
        assert vision.resized_hw_px == source_hw


@pytest.mark.parametrize("make_image", [_noise, _gradient], ids=["noise", "gradient"])
@pytest.mark.parametrize(
    ("source_hw", "max_pixels"),
    [
        pytest.param((1080, 1920), SMALL_MAX_PIXELS, id="1920x1080-small-budget"),
        pytest.param((1080, 1920), 200_704, id="1920x1080-mid-budget"),
        pytest.param((1080, 1920), MAX_PIXELS, id="1920x1080-full-budget"),
        pytest.param((720, 1280), SMALL_MAX_PIXELS, id="1280x720-small-budget"),
        pytest.param((720, 1280), 200_704, id="1280x720-mid-budget"),
        pytest.param((480, 640), MAX_PIXELS, id="640x480-kept"),
        pytest.param((480, 640), SMALL_MAX_PIXELS, id="640x480-small-budget"),
        # Pillow 13 resizes the height first here (it shrinks by more than twice the width), the width first
        # below; Pillow 12 the width first in both.
        pytest.param((333, 517), MAX_PIXELS, id="517x333-odd"),
        pytest.param((517, 333), MAX_PIXELS, id="333x517-odd-portrait"),
        pytest.param((96, 128), MAX_PIXELS, id="128x96-upscaled-to-min-pixels"),
        pytest.param((60, 90), MAX_PIXELS, id="90x60-upscaled-to-min-pixels"),
    ],
)
def test_tensor_path_matches_the_pil_path(make_image, source_hw, max_pixels):
    image = make_image(*source_hw)
    expected = prepare_image(image, max_pixels=max_pixels, exact=True)
    vision = prepare_image_tensor(torch.from_numpy(image), max_pixels=max_pixels)
    assert torch.equal(vision.image_grid_thw, expected.image_grid_thw)
    assert vision.resized_hw_px == expected.resized_hw_px
    apart = (_levels(vision) - _levels(expected)).abs().float()
    assert float(apart.max()) <= MAX_LEVELS_APART
    assert float(apart.mean()) <= MEAN_LEVELS_APART


def _rendered(width_px: int) -> np.ndarray:
    """A simulator frame (road, lane marks, cars, sky) rendered at ``width_px`` wide, 16:9."""
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.sim.render import render_front
    from wamdiff2_ros.sim.scenes import make_scene

    scene = make_scene(3)
    return render_front(Camera().scaled_to_width(width_px), scene.lanes, scene.snapshot()).image_rgb


# The reduce-first resize against the one-step one, in uint8 levels, measured on the cases below: max 5 on
# noise (mean up to 0.85), 2 on the rendered frames (mean up to 0.10), 1 on the gradient (mean up to 0.20).
REDUCED_MAX_LEVELS_APART = 6
REDUCED_MEAN_LEVELS_APART = 1.0


@pytest.mark.parametrize("make_image", [_noise, _gradient, "rendered"], ids=["noise", "gradient", "rendered"])
@pytest.mark.parametrize("source_hw", [(1080, 1920), (720, 1280)], ids=["1920x1080", "1280x720"])
def test_reduce_first_resize_stays_within_a_few_levels_of_the_one_step_resize(make_image, source_hw):
    image = _rendered(source_hw[1]) if make_image == "rendered" else make_image(*source_hw)
    exact = prepare_image(image, max_pixels=SMALL_MAX_PIXELS, exact=True)
    fast = prepare_image(image, max_pixels=SMALL_MAX_PIXELS)
    assert torch.equal(fast.image_grid_thw, exact.image_grid_thw)
    assert fast.resized_hw_px == exact.resized_hw_px == (64, 128)
    apart = (_levels(fast) - _levels(exact)).abs().float()
    assert 0 < float(apart.max()) <= REDUCED_MAX_LEVELS_APART  # the reduce did run
    assert float(apart.mean()) <= REDUCED_MEAN_LEVELS_APART


@pytest.mark.parametrize("exact", [False, True], ids=["reduce-first", "one-step"])
@pytest.mark.parametrize("max_pixels", [SMALL_MAX_PIXELS, 36_864, 200_704, MAX_PIXELS])
@pytest.mark.parametrize(
    "source_hw",
    [(1080, 1920), (720, 1280), (360, 640), (480, 640), (333, 517), (517, 333), (1081, 1921), (96, 128)],
    ids=lambda hw: f"{hw[1]}x{hw[0]}",
)
def test_the_banded_resize_is_pils_resize_to_the_bit(source_hw, max_pixels, exact):
    # OpenCV's 2x box reduce and the two halves resized apart must not move a level: the bundled model was
    # trained on PIL's resize (and on the portrait and upscaled cases Pillow's order forbids the halves).
    frame = _noise(*source_hw)
    height_px, width_px = smart_resize(*source_hw, max_pixels=max_pixels)
    expected = Image.fromarray(frame).resize(
        (width_px, height_px), Image.Resampling.BICUBIC, reducing_gap=None if exact else RESIZE_REDUCING_GAP
    )
    resized = _resize_in_bands(frame, height_px, width_px, exact=exact)
    assert resized.flags.writeable and np.array_equal(resized, np.asarray(expected))


def test_a_camera_frame_to_the_bundled_budget_is_resized_in_two_halves(monkeypatch):
    submitted = []

    class Inline:
        def submit(self, function, *args):
            submitted.append(args)
            future = Future()
            future.set_result(function(*args))
            return future

    monkeypatch.setattr(image_module, "_band_worker", Inline)
    prepare_image(_noise(1080, 1920), max_pixels=36_864)
    assert len(submitted) == 1  # the bottom half; the top one on the calling thread


@pytest.mark.parametrize(
    ("source_hw", "max_pixels"),
    [
        pytest.param((360, 640), SMALL_MAX_PIXELS, id="simulator-frame-5x"),
        pytest.param((1080, 1920), MAX_PIXELS, id="1920x1080-full-budget"),
        pytest.param((720, 1280), 200_704, id="1280x720-mid-budget"),
    ],
)
def test_a_shrink_under_6x_takes_the_one_step_resize(source_hw, max_pixels):
    # The simulator's frames (what the bundled model was trained on) and the 2b budgets never take the reduce.
    image = _noise(*source_hw)
    fast = prepare_image(image, max_pixels=max_pixels)
    assert torch.equal(
        fast.pixel_values, prepare_image(image, max_pixels=max_pixels, exact=True).pixel_values
    )


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


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        pytest.param(torch.zeros((10, 10), dtype=torch.uint8), "RGB array", id="grayscale"),
        pytest.param(torch.zeros((10, 10, 4), dtype=torch.uint8), "RGB array", id="rgba"),
        pytest.param(torch.zeros((3, 10, 10), dtype=torch.uint8), "RGB array", id="channels-first"),
        pytest.param(torch.zeros((10, 10, 3), dtype=torch.float32), "uint8", id="float"),
        pytest.param(torch.zeros((2, 500, 3), dtype=torch.uint8), "aspect ratio", id="too-elongated"),
        pytest.param(torch.zeros((0, 5, 3), dtype=torch.uint8), "positive size", id="empty"),
    ],
)
def test_unusable_tensor_frame_is_an_input_error(frame, message):
    with pytest.raises(InputError, match=message):
        prepare_image_tensor(frame)


def test_planning_prompt_from_a_tensor_frame_has_the_same_tokens(tokenizer, front_image, planning_prompt):
    prompt = build_planning_prompt(
        tokenizer, torch.from_numpy(front_image), "right", (4.66, -0.09), (0.17, -1.53)
    )
    assert torch.equal(prompt.input_ids, planning_prompt.input_ids)
    assert torch.equal(prompt.mm_token_type_ids, planning_prompt.mm_token_type_ids)
    assert torch.equal(prompt.image_grid_thw, planning_prompt.image_grid_thw)
    assert prompt.pixel_values.shape == planning_prompt.pixel_values.shape
