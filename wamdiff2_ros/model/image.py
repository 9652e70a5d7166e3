"""Front-camera image to Qwen3-VL vision inputs: resize within the reference pixel budget, then patchify.

Resizing follows qwen-vl-utils' ``smart_resize`` as the reference's inference calls it (min 12,544 and max
2,073,600 pixels, sides multiples of 32 px = patch 16 x merge 2); patchify and normalisation are transformers'
PIL image processor with Qwen3-VL's mean/std, with its own resize turned off so the image is resized once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from wamdiff2_ros.errors import InputError

MIN_PIXELS = 12_544  # 112^2, reference gpu.py:74 and all configs
MAX_PIXELS = 2_073_600  # 1920x1080, reference gpu.py:75
PATCH_SIZE_PX = 16
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
TOKEN_SIDE_PX = PATCH_SIZE_PX * MERGE_SIZE  # one visual LLM token covers 32x32 px
QWEN3_VL_MEAN = (0.5, 0.5, 0.5)  # Qwen3-VL preprocessor_config.json (not the CLIP mean of Qwen2-VL)
QWEN3_VL_STD = (0.5, 0.5, 0.5)
MAX_ASPECT_RATIO = 200  # qwen-vl-utils refuses more elongated images


@dataclass(frozen=True)
class VisionInputs:
    """Patchified image as the vision tower takes it."""

    pixel_values: torch.Tensor  # (grid_h * grid_w, 3 * 2 * 16 * 16) float32
    image_grid_thw: torch.Tensor  # (1, 3) int64: (1, grid_h, grid_w) in 16 px patches
    resized_hw_px: tuple[int, int]

    @property
    def num_tokens(self) -> int:
        """Number of ``<|image_pad|>`` tokens in the prompt: patches / merge^2."""
        return int(self.image_grid_thw.prod()) // (MERGE_SIZE * MERGE_SIZE)


def smart_resize(
    height_px: int,
    width_px: int,
    *,
    factor: int = TOKEN_SIDE_PX,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """Target (height, width) in pixels: multiples of ``factor``, area within [min, max], aspect kept.

    Args:
        height_px: source height.
        width_px: source width.
        factor: side granularity (32 px for Qwen3-VL).
        min_pixels: smallest area allowed.
        max_pixels: largest area allowed.

    Returns:
        (height, width) of the resized image.

    Raises:
        InputError: empty image or aspect ratio above 200.
    """
    if height_px <= 0 or width_px <= 0:
        raise InputError(f"image must have a positive size, got {height_px}x{width_px}")
    if max(height_px, width_px) / min(height_px, width_px) > MAX_ASPECT_RATIO:
        raise InputError(f"image aspect ratio must be at most {MAX_ASPECT_RATIO}, got {height_px}x{width_px}")
    h_bar = max(factor, round(height_px / factor) * factor)
    w_bar = max(factor, round(width_px / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height_px * width_px / max_pixels)
        h_bar = max(factor, math.floor(height_px / beta / factor) * factor)
        w_bar = max(factor, math.floor(width_px / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height_px * width_px))
        h_bar = math.ceil(height_px * beta / factor) * factor
        w_bar = math.ceil(width_px * beta / factor) * factor
    return h_bar, w_bar


def as_rgb_array(image: np.ndarray | Image.Image) -> np.ndarray:
    """A (H, W, 3) uint8 RGB array from a PIL image or an array; ``InputError`` for anything else."""
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise InputError(f"image must be an (H, W, 3) uint8 RGB array, got {array.dtype} {array.shape}")
    return array


def prepare_image(
    image: np.ndarray | Image.Image,
    *,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> VisionInputs:
    """Resize (bicubic, as PIL's default in qwen-vl-utils) and patchify one RGB image.

    Args:
        image: (H, W, 3) uint8 RGB array or PIL image.
        min_pixels: smallest resized area.
        max_pixels: largest resized area.

    Returns:
        The vision inputs; ``num_tokens`` visual tokens of 32x32 px each.

    Raises:
        InputError: not an RGB uint8 image, empty, or too elongated.
    """
    array = as_rgb_array(image)
    height_px, width_px = smart_resize(
        array.shape[0], array.shape[1], min_pixels=min_pixels, max_pixels=max_pixels
    )
    resized = Image.fromarray(array).resize((width_px, height_px), Image.Resampling.BICUBIC)
    processor = Qwen2VLImageProcessorPil(
        do_resize=False,
        patch_size=PATCH_SIZE_PX,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
        image_mean=list(QWEN3_VL_MEAN),
        image_std=list(QWEN3_VL_STD),
    )
    features = processor(images=[resized], return_tensors="pt")
    return VisionInputs(
        pixel_values=features["pixel_values"].to(torch.float32),
        image_grid_thw=features["image_grid_thw"].to(torch.int64),
        resized_hw_px=(height_px, width_px),
    )
