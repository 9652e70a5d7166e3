"""Random-weight starting points of small trained models: the ``tiny`` preset, deeper and wider.

Same heads as ``tiny`` (heads of 16, half as many key-value heads); ``layers`` text layers and an MLP of
``intermediate``; ``hidden`` sets the text width and the vision tower's output to match. The vision tower is
``tiny``'s (2 blocks of width 32) unless ``vision_depth`` / ``vision_hidden`` say otherwise: a model that
must find small cars in more pixels needs a wider tower more than a wider decoder, and on the CPU the tower
runs once a frame while the decoder runs once a denoising step. With
``kept_ids`` (``model/vocab.py ids_for``: the ids a set of scenes uses) the embedding keeps only those rows,
which frees the bytes for width: with the full 151,936-id vocabulary the embedding dominates the size.
"""

from __future__ import annotations

from transformers import Qwen3VLForConditionalGeneration

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.presets import preset_config
from wamdiff2_ros.model.vocab import install

HEAD_DIM = 16  # the tiny preset's


def initial_model(
    *,
    seed: int = 0,
    layers: int = 6,
    intermediate: int = 512,
    hidden: int = 64,
    vision_depth: int | None = None,
    vision_hidden: int | None = None,
    kept_ids: list[int] | None = None,
) -> Qwen3VLForConditionalGeneration:
    """A random-weight model of that shape (``hidden``, ``vision_hidden``: multiples of 32), its vocabulary
    ``kept_ids``.

    Raises:
        InputError: a vision tower of fewer than two blocks (DeepStack taps its last two: with one, a tap
            would name no block and training would fail at its first forward).
    """
    if vision_depth is not None and vision_depth < 2:
        raise InputError(
            f"vision_depth must be at least 2 (DeepStack taps the last two blocks), got {vision_depth}"
        )
    config = preset_config("tiny")
    vision = config.vision_config
    if vision_depth is not None:  # DeepStack taps the tower as often as tiny does, its last two blocks
        vision.depth = vision_depth
        vision.deepstack_visual_indexes = [vision_depth - 2, vision_depth - 1]
    if vision_hidden is not None:  # tiny's proportions: MLP twice the width, heads of 16
        vision.hidden_size, vision.intermediate_size = vision_hidden, 2 * vision_hidden
        vision.num_heads = vision_hidden // HEAD_DIM
    text = config.text_config
    text.num_hidden_layers, text.intermediate_size = layers, intermediate
    text.hidden_size, config.vision_config.out_hidden_size = hidden, hidden
    text.num_attention_heads = hidden // HEAD_DIM
    text.num_key_value_heads = text.num_attention_heads // 2
    text.vocab_size = len(kept_ids) if kept_ids else text.vocab_size
    model = build_model(config, seed=seed)
    if kept_ids:
        install(model, kept_ids)
    return model
