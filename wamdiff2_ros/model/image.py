"""Front-camera image to Qwen3-VL vision inputs: resize within the reference pixel budget, then patchify.

Resizing follows qwen-vl-utils' ``smart_resize`` as the reference's inference calls it (min 12,544 and max
2,073,600 pixels, sides multiples of 32 px = patch 16 x merge 2), with PIL's bicubic resize; normalisation
(Qwen3-VL's mean/std) and the patch layout are transformers' PIL image processor's, to the bit, in torch ops
(a table of the 256 levels; test_image.py holds them equal), 4x faster than the processor itself.
A frame shrunk by 6x or more (a camera frame to a small model's budget, 12,544 or 36,864 pixels) is first
box-reduced by an integer factor in PIL's own two-step resize (``reducing_gap``) and at most a few levels off
the one-step resize; ``exact=True`` keeps the one-step resize, the twin. The simulator's 640x360 renders
shrink by 5x or less, so they never take the reduce. Both resizes run as ``_resize_in_bands`` (OpenCV's
2x box reduce, the output's halves on two threads), equal to PIL's own call to the bit: on the 2-core
machine a 1920x1080 frame becomes the bundled model's inputs in ~3.3 ms (one PIL call and the processor:
7.7 ms; the one-step resize ~9).

``prepare_image_tensor`` does the same in torch ops on the frame's device, so a camera frame uploaded once is
resized, normalised and patchified there: PIL's two-pass resize is torch's antialiased bicubic one axis at a
time, and normalisation and patch layout are exactly transformers'. The values differ from the PIL path's by
at most a level or two of 255 (PIL's fixed-point arithmetic); numpy and PIL images keep the PIL path, which
the bundled model was trained on.
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import cv2
import numpy as np
import PIL
import torch
import torch.nn.functional as F
from PIL import Image

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
# Pillow 13 resizes the height first when it shrinks by more than twice as many pixels as the width
# (python-pillow/Pillow#9549); Pillow 12 and earlier always resize the width first.
PIL_HEIGHT_FIRST = int(PIL.__version__.split(".")[0]) >= 13
# PIL box-reduces first by floor(scale / gap) when that is >= 2, then resizes the rest with the bicubic
# filter: from 3.0 up PIL's docs call the result indistinguishable from the one-step resize in most cases.
# Measured against it, 1920x1080 and 1280x720 to 128x64: at most 2 levels apart (mean 0.10) on simulator
# renders, 5 (mean 0.85) on uniform noise, 1 on a gradient (test_image.py holds the bounds).
RESIZE_REDUCING_GAP = 3.0


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


def _check_rgb_uint8(is_uint8: bool, shape: tuple[int, ...], dtype: object) -> None:
    if not is_uint8 or len(shape) != 3 or shape[2] != 3:
        raise InputError(f"image must be an (H, W, 3) uint8 RGB array, got {dtype} {shape}")


def as_rgb_array(image: np.ndarray | Image.Image) -> np.ndarray:
    """A (H, W, 3) uint8 RGB array from a PIL image or an array; ``InputError`` for anything else."""
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    _check_rgb_uint8(array.dtype == np.uint8, array.shape, array.dtype)
    return array


def prepare_image(
    image: np.ndarray | Image.Image,
    *,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
    exact: bool = False,
) -> VisionInputs:
    """Resize (bicubic, as PIL's default in qwen-vl-utils) and patchify one RGB image.

    Args:
        image: (H, W, 3) uint8 RGB array or PIL image.
        min_pixels: smallest resized area.
        max_pixels: largest resized area.
        exact: resize in one step even where PIL's reduce-first resize applies (``RESIZE_REDUCING_GAP``).

    Returns:
        The vision inputs; ``num_tokens`` visual tokens of 32x32 px each.

    Raises:
        InputError: not an RGB uint8 image, empty, or too elongated.
    """
    array = as_rgb_array(image)
    height_px, width_px = smart_resize(
        array.shape[0], array.shape[1], min_pixels=min_pixels, max_pixels=max_pixels
    )
    resized = _resize_in_bands(array, height_px, width_px, exact=exact)
    return _normalised_patches(torch.from_numpy(resized).permute(2, 0, 1))


def _reduce_factors(in_hw: tuple[int, int], out_hw: tuple[int, int]) -> tuple[int, int]:
    """PIL's integer (x, y) box-reduce factors for ``reducing_gap`` (``Image.resize``'s own formula)."""
    (in_height_px, in_width_px), (height_px, width_px) = in_hw, out_hw
    return (
        int(in_width_px / width_px / RESIZE_REDUCING_GAP) or 1,
        int(in_height_px / height_px / RESIZE_REDUCING_GAP) or 1,
    )


def _pil_height_first(in_hw: tuple[int, int], out_hw: tuple[int, int]) -> bool:
    """Whether the installed Pillow resizes the height before the width (``PIL_HEIGHT_FIRST``)."""
    (in_height_px, in_width_px), (height_px, width_px) = in_hw, out_hw
    return (
        PIL_HEIGHT_FIRST
        and height_px < in_height_px
        and in_height_px - height_px > 2 * (in_width_px - width_px)
    )


def _resize_in_bands(array: np.ndarray, height_px: int, width_px: int, *, exact: bool) -> np.ndarray:
    """``Image.fromarray(array).resize((width, height), BICUBIC, reducing_gap)`` as a new (H, W, 3) uint8
    array, equal to the bit, faster.

    A frame shrunk by 2 on both axes (1920x1080 to the bundled model's 256x128) is box-reduced by OpenCV
    (0.3 ms on the 2-core machine against PIL's 1.8, the same values: PIL's (sum + 2) >> 2), which also skips
    PIL's copy of the whole frame; and the bicubic pass is split into a top and a bottom half of the output
    rows, one on a worker thread (PIL lets go of the GIL): each half's source box is the whole box's half,
    so PIL computes the same filter taps for it (3.6 -> 2.0 ms at 1080p). Where Pillow would resize the
    height first, for the whole or for a half, one call resizes the whole.
    """
    factor_x, factor_y = (1, 1) if exact else _reduce_factors(array.shape[:2], (height_px, width_px))
    in_height_px, in_width_px = array.shape[:2]
    if (factor_x, factor_y) == (2, 2) and in_height_px % 2 == 0 and in_width_px % 2 == 0:
        array = cv2.resize(array, (in_width_px // 2, in_height_px // 2), interpolation=cv2.INTER_AREA)
        factor_x = factor_y = 1
    if array.shape[:2] == (height_px, width_px):
        return np.array(array)
    image = Image.fromarray(array)
    if factor_x > 1 or factor_y > 1:
        reduced_first = image.resize(
            (width_px, height_px), Image.Resampling.BICUBIC, reducing_gap=RESIZE_REDUCING_GAP
        )
        return np.array(reduced_first)
    box_width, box_height = image.size
    half_px, middle = height_px // 2, box_height / 2  # box_height * (1/2): exact in floating point
    # Pillow picks the order from the image's height and the output's, not the box's: a half's output can
    # tip it to height-first where the whole stays width-first.
    if height_px % 2 or any(_pil_height_first(image.size[::-1], (h, width_px)) for h in (height_px, half_px)):
        return np.array(image.resize((width_px, height_px), Image.Resampling.BICUBIC))
    bottom = _band_worker().submit(
        image.resize, (width_px, half_px), Image.Resampling.BICUBIC, (0, middle, box_width, box_height)
    )
    top = image.resize((width_px, half_px), Image.Resampling.BICUBIC, (0, 0, box_width, middle))
    return np.concatenate([np.asarray(top), np.asarray(bottom.result())])


@functools.cache
def _band_worker() -> ThreadPoolExecutor:
    """The thread that resizes the bottom half of a frame (``_resize_in_bands``)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="resize-band")


# A forked child (the data generators' workers) has the parent's executor but not its thread: a new one.
os.register_at_fork(after_in_child=_band_worker.cache_clear)


@functools.cache
def _normalised_levels(device: torch.device) -> torch.Tensor:
    """(3, 256) float32: each uint8 level, per channel, rescaled and normalised as transformers' numpy code.

    A lookup table rather than arithmetic on the device, so every device gives numpy's values to the bit:
    multiplying by 1/255 in float32 misses them in the last bit for 111 of the 256 levels, and torch on CUDA
    turns a division by a scalar into that multiply.
    """
    # transformers' rescale multiplies in float64 and casts to float32; its normalise stays in float32.
    levels = (np.arange(256, dtype=np.float64) * (1 / 255)).astype(np.float32)
    mean = np.asarray(QWEN3_VL_MEAN, dtype=np.float32)[:, None]
    std = np.asarray(QWEN3_VL_STD, dtype=np.float32)[:, None]
    return torch.from_numpy((levels[None, :] - mean) / std).to(device)


def _resize_like_pil(image: torch.Tensor, height_px: int, width_px: int) -> torch.Tensor:
    """(3, H, W) uint8 resized as PIL's bicubic ``Image.resize``: one axis at a time, in PIL's order.

    Each pass is torch's antialiased bicubic (PIL's a=-0.5 filter) in float32, rounded and clamped to uint8 as
    PIL's intermediate and result images are; clamping between the passes is what keeps the bicubic overshoot
    at sharp edges out of the second pass (up to 23 levels apart on noise when done in one float pass). The
    order is the installed Pillow's (``PIL_HEIGHT_FIRST``). A pass whose size is unchanged is skipped, as PIL
    does.
    """
    in_height_px, in_width_px = image.shape[1:]
    height_first = _pil_height_first((in_height_px, in_width_px), (height_px, width_px))
    middle_hw = (height_px, in_width_px) if height_first else (in_height_px, width_px)
    for size in (middle_hw, (height_px, width_px)):
        if image.shape[1:] != size:
            resized = F.interpolate(
                image[None].to(torch.float32), size=size, mode="bicubic", antialias=True, align_corners=False
            )[0]
            image = resized.round_().clamp_(0, 255).to(torch.uint8)
    return image


def _patchify(image: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(C, H, W) to (grid_h * grid_w, C * 2 * 16 * 16) in ``Qwen2VLImageProcessorPil.patchify``'s layout.

    Patches run in merge order (each 2x2 block of 16 px patches together), each flattened as (C, T, 16, 16)
    with the single frame repeated to the temporal patch size.
    """
    channels, height_px, width_px = image.shape
    grid_h, grid_w = height_px // PATCH_SIZE_PX, width_px // PATCH_SIZE_PX
    patches = image.reshape(
        channels,
        grid_h // MERGE_SIZE,
        MERGE_SIZE,
        PATCH_SIZE_PX,
        grid_w // MERGE_SIZE,
        MERGE_SIZE,
        PATCH_SIZE_PX,
    ).permute(1, 4, 2, 5, 0, 3, 6)  # (gh, gw, mh, mw, C, ph, pw)
    patches = patches.unsqueeze(5).expand(*patches.shape[:5], TEMPORAL_PATCH_SIZE, *patches.shape[5:])
    return patches.reshape(grid_h * grid_w, channels * TEMPORAL_PATCH_SIZE * PATCH_SIZE_PX**2), grid_h, grid_w


def prepare_image_tensor(
    frame: torch.Tensor,
    *,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> VisionInputs:
    """``prepare_image(exact=True)`` in torch ops on the frame's device (CPU or CUDA).

    Same target size, grid, normalisation and patch layout as ``prepare_image``; the resize is PIL's one-step
    resize, one axis at a time in torch's antialiased bicubic (``_resize_like_pil``). Against
    ``prepare_image(exact=True)`` on the cases of test_image.py (1920x1080 and 1280x720 at budgets 12,544 to
    2,073,600, 640x480, 517x333 and 333x517, upscales of 128x96 and 90x60) the values were at most 2 levels of
    255 apart on seeded noise (mean at most 0.0084 levels) and 1 on a smooth gradient (mean at most 0.042);
    equal where no resize is needed.

    Args:
        frame: (H, W, 3) uint8 RGB tensor.
        min_pixels: smallest resized area.
        max_pixels: largest resized area.

    Returns:
        The vision inputs: ``pixel_values`` float32 on the frame's device, ``image_grid_thw`` on the CPU.

    Raises:
        InputError: not an RGB uint8 image, empty, or too elongated.
    """
    _check_rgb_uint8(frame.dtype == torch.uint8, tuple(frame.shape), frame.dtype)
    height_px, width_px = smart_resize(
        frame.shape[0], frame.shape[1], min_pixels=min_pixels, max_pixels=max_pixels
    )
    return _normalised_patches(_resize_like_pil(frame.permute(2, 0, 1), height_px, width_px))


def _normalised_patches(image: torch.Tensor) -> VisionInputs:
    """A resized (3, H, W) uint8 image, normalised and patchified as transformers' image processor does it."""
    levels = _normalised_levels(image.device)
    normalised = levels.gather(1, image.reshape(3, -1).long()).reshape(image.shape)
    pixel_values, grid_h, grid_w = _patchify(normalised)
    return VisionInputs(
        pixel_values=pixel_values,
        image_grid_thw=torch.tensor([[1, grid_h, grid_w]], dtype=torch.int64),
        resized_hw_px=tuple(image.shape[1:]),
    )
