"""Named Qwen3-VL shapes (tiny, 2b, 8b) as data, and the transformers config built from one.

Only shapes live here; weights come from a checkpoint (model/checkpoint.py) or random init
(model/backbone.py).
The 2b values are the published Qwen3-VL-2B-Instruct config.json (docs/REFERENCE.md §6.1);
the 8b values are the published Qwen3-VL-8B-Instruct config.json (the WAM-Diff2 teacher is
"WAM-Diff2-B32-8B").
"""

from __future__ import annotations

from typing import Any

from transformers import Qwen3VLConfig

from wamdiff2_ros.errors import InputError

# Qwen3-VL special ids, also in every preset config (reference configuration_wam_diff2.py:245-248).
VISION_START_ID = 151652
VISION_END_ID = 151653
IMAGE_PAD_ID = 151655
VIDEO_PAD_ID = 151656
QWEN_VOCAB_SIZE = 151936  # embedding rows; the tokenizer itself has 151,669 entries

_VISION_COMMON: dict[str, Any] = {
    "patch_size": 16,  # 16x16 px patches ...
    "spatial_merge_size": 2,  # ... merged 2x2 into one LLM token: 32x32 px per visual token
    "temporal_patch_size": 2,  # a still image is repeated twice along time
    "in_channels": 3,
    "num_position_embeddings": 2304,  # 48x48 learned vision position grid, interpolated
    "hidden_act": "gelu_pytorch_tanh",
}
_ROPE_REAL: dict[str, Any] = {
    "rope_type": "default",
    "rope_theta": 5_000_000.0,
    "mrope_section": [24, 20, 20],  # temporal, height, width halves of head_dim 128; sums to 64
    "mrope_interleaved": True,
}

PRESETS: dict[str, dict[str, Any]] = {
    # Test preset: real vocabulary (so the real tokenizer's ids are valid), everything else as small as the
    # architecture allows, so that a CPU decode takes milliseconds per forward.
    "tiny": {
        "text_config": {
            "vocab_size": QWEN_VOCAB_SIZE,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,  # GQA kept so cache/mask code sees grouped heads as in 2b
            "head_dim": 16,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": True,
            "rope_parameters": {**_ROPE_REAL, "mrope_section": [4, 2, 2]},  # sums to head_dim / 2
        },
        "vision_config": {
            **_VISION_COMMON,
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,  # = text hidden size
            "deepstack_visual_indexes": [0, 1],  # deepstack into both text layers, as the real model does
        },
        "tie_word_embeddings": True,
    },
    # Qwen3-VL-2B-Instruct: 2.128 B parameters (vision 407.0 M).
    "2b": {
        "text_config": {
            "vocab_size": QWEN_VOCAB_SIZE,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": True,
            "rope_parameters": dict(_ROPE_REAL),
        },
        "vision_config": {
            **_VISION_COMMON,
            "depth": 24,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_heads": 16,
            "out_hidden_size": 2048,
            "deepstack_visual_indexes": [5, 11, 17],
        },
        "tie_word_embeddings": True,
    },
    # Qwen3-VL-8B-Instruct (teacher shape): untied head, 36 layers.
    "8b": {
        "text_config": {
            "vocab_size": QWEN_VOCAB_SIZE,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": False,
            "rope_parameters": dict(_ROPE_REAL),
        },
        "vision_config": {
            **_VISION_COMMON,
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "out_hidden_size": 4096,
            "deepstack_visual_indexes": [8, 16, 24],
        },
        "tie_word_embeddings": False,
    },
}


def preset_config(name: str) -> Qwen3VLConfig:
    """The transformers config of a named preset, with the Qwen3-VL special ids and SDPA attention.

    Args:
        name: one of ``PRESETS`` (tiny, 2b, 8b).

    Returns:
        A fresh ``Qwen3VLConfig``; callers may change it without touching the preset.

    Raises:
        InputError: unknown preset name.
    """
    if name not in PRESETS:
        raise InputError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    spec = PRESETS[name]
    config = Qwen3VLConfig(
        text_config=dict(spec["text_config"]),
        vision_config=dict(spec["vision_config"]),
        image_token_id=IMAGE_PAD_ID,
        video_token_id=VIDEO_PAD_ID,
        vision_start_token_id=VISION_START_ID,
        vision_end_token_id=VISION_END_ID,
        tie_word_embeddings=spec["tie_word_embeddings"],
    )
    # SDPA takes the boolean block-causal masks of model/masks.py as they are (eager would need float masks).
    config._attn_implementation = "sdpa"
    return config
