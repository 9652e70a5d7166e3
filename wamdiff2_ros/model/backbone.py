"""Builds transformers' Qwen3-VL model from a preset or a config; no weights are read here.

The model class is used as transformers ships it (no copy, no subclass): WAM-Diff2's differences are all in
the inputs (block-causal 4D masks, explicit M-RoPE positions, the mask token), which model/masks.py and
model/positions.py build.
"""

from __future__ import annotations

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.initialization import no_init_weights

from wamdiff2_ros.model.presets import preset_config

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"fp32"``/``"bf16"``/``"fp16"`` (or a torch dtype) to a torch dtype; ``ValueError`` otherwise."""
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def build_model(
    config: Qwen3VLConfig | str,
    *,
    seed: int | None = 0,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "cpu",
    init_weights: bool = True,
) -> Qwen3VLForConditionalGeneration:
    """Instantiate a Qwen3-VL model in eval mode.

    Args:
        config: a config or a preset name (tiny, 2b, 8b).
        seed: seed of the random initialisation (the same seed gives the same weights); ``None`` leaves the
            global RNG alone.
        dtype: parameter dtype.
        device: where the parameters live; ``"meta"`` builds shapes only (for counting parameters).
        init_weights: ``False`` skips the random initialisation (memory is left uninitialised), for
            callers that load every tensor afterwards.

    Returns:
        The model with SDPA attention, in ``eval()`` mode.
    """
    if isinstance(config, str):
        config = preset_config(config)
    # SDPA takes the boolean 4D masks as they are; eager would silently misread them (docs/REFERENCE.md §6.2).
    config._attn_implementation = "sdpa"
    torch_dtype = parse_dtype(dtype)
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.device(device):
            if init_weights:
                model = Qwen3VLForConditionalGeneration(config)
            else:
                with no_init_weights():
                    model = Qwen3VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous_dtype)
    return model.eval()


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (a tied embedding/head counts once)."""
    return sum(p.numel() for p in model.parameters())
