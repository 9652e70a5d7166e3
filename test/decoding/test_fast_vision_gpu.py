"""The lean vision tower on CUDA (marker ``gpu``): compiled and replayed from a CUDA graph it is transformers'
tower (fp32: to rounding; bf16 at the 2b shape: within bf16 tolerance), and a
replay on new pixels is a fresh forward, not the captured one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.prompt import build_prompt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run through the device tool)"),
]


def _prompt(tokenizer, width: int, height: int, seed: int):
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return build_prompt(tokenizer, "<image> Plan.", pixels)


def _reference(model, prompt) -> list[torch.Tensor]:
    with torch.no_grad():
        features = model.model.get_image_features(
            prompt.pixel_values.to(model.device, model.dtype), prompt.image_grid_thw.to(model.device)
        )
    return [torch.cat(features.pooler_output)] + [torch.cat(layer) for layer in features.deepstack_features]


def _relative_error(mine: list[torch.Tensor], theirs: list[torch.Tensor]) -> float:
    return max(
        ((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(mine, theirs, strict=True)
    )


@pytest.fixture(scope="module")
def cuda_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False  # transformers' patch embedding is a cuDNN convolution
    return build_model("tiny", seed=0, device="cuda")


@pytest.fixture(scope="module")
def cuda_2b():
    return build_model("2b", seed=0, dtype="bf16", device="cuda")


@pytest.mark.parametrize("fast", [False, True], ids=["eager", "compile-graph"])
def test_lean_vision_fp32_on_cuda_is_transformers_tower(cuda_fp32, tokenizer, fast):
    vision = LeanVision(cuda_fp32, compile=fast, cuda_graph=fast)
    for seed in (1, 2):  # the second replays the graph on new pixels
        prompt = _prompt(tokenizer, 160, 96, seed)
        features = vision(prompt.pixel_values, prompt.image_grid_thw)
        error = _relative_error([features.image, *features.deepstack], _reference(cuda_fp32, prompt))
        assert error < 1e-5, f"relative error {error:.3g}"
    assert vision.captures == (1 if fast else 0)


def test_lean_vision_bf16_2b_compiled_graphed_is_within_bf16_of_transformers(cuda_2b, tokenizer):
    vision = LeanVision(cuda_2b, compile=True, cuda_graph=True)
    for seed in (1, 2):
        prompt = _prompt(tokenizer, 640, 360, seed)
        features = vision(prompt.pixel_values, prompt.image_grid_thw)
        error = _relative_error([features.image, *features.deepstack], _reference(cuda_2b, prompt))
        assert error < 2e-2, f"relative error {error:.3g}"
