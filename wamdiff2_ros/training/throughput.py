"""Model FLOPs of a training step and model-FLOPs utilisation (MFU) against a stated peak.

Counts follow the usual 6 x parameters x tokens rule (forward 2, backward 4) for the matrix weights that each
token passes through, plus attention scores over the full (masked) sequence, plus the LM head at the scored
positions only; the embedding lookup costs no FLOPs. Activation recomputation is not counted (MFU, not HFU).
"""

from __future__ import annotations

from transformers import Qwen3VLConfig

# Dense bf16 tensor-core peaks, FLOP/s (vendor datasheets; the H200 has the H100's: docs/REFERENCE.md §7.1).
PEAK_BF16_FLOPS = {"NVIDIA H200": 989e12, "NVIDIA H100 80GB HBM3": 989e12}


def text_matrix_params(config: Qwen3VLConfig) -> int:
    """Weights of the text decoder's attention and MLP matrices (what each text token multiplies through)."""
    text = config.text_config
    q = text.num_attention_heads * text.head_dim
    kv = text.num_key_value_heads * text.head_dim
    attention = text.hidden_size * (q + 2 * kv) + q * text.hidden_size
    mlp = 3 * text.hidden_size * text.intermediate_size
    return text.num_hidden_layers * (attention + mlp)


def vision_matrix_params(config: Qwen3VLConfig) -> int:
    """Weights of the vision blocks' matrices (what each 16x16 patch multiplies through)."""
    vision = config.vision_config
    per_block = 4 * vision.hidden_size**2 + 2 * vision.hidden_size * vision.intermediate_size
    return vision.depth * per_block


def train_step_flops(
    config: Qwen3VLConfig, seq_lens: list[int], head_positions: int, image_patches: list[int]
) -> float:
    """Model FLOPs of forward and backward over one batch.

    Args:
        config: the model config.
        seq_lens: real length L of each sample ([prefix | clean | noisy]).
        head_positions: positions scored by the LM head (the masked ones).
        image_patches: 16x16 patches of each image (the vision tower attends over all of an image's).

    Returns:
        FLOPs (forward + backward).
    """
    text = config.text_config
    tokens = sum(seq_lens)
    dense = 6 * text_matrix_params(config) * tokens
    # QK^T and AV: 2 matmuls of 2 * L * L * (heads * head_dim) per layer forward, times 3 with backward.
    attention = sum(
        3 * 4 * length * length * text.num_attention_heads * text.head_dim * text.num_hidden_layers
        for length in seq_lens
    )
    head = 6 * text.hidden_size * text.vocab_size * head_positions
    vision_config = config.vision_config
    vision = sum(
        6 * vision_matrix_params(config) * n + 3 * 4 * n * n * vision_config.hidden_size * vision_config.depth
        for n in image_patches
    )
    return float(dense + attention + head + vision)


def mfu(flops: float, seconds: float, device_name: str, world_size: int = 1) -> float | None:
    """Model FLOPs utilisation, or None for a device without a known peak (e.g. a CPU)."""
    peak = PEAK_BF16_FLOPS.get(device_name)
    if peak is None or seconds <= 0:
        return None
    return flops / seconds / (peak * world_size)
