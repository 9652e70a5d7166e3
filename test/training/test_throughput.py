"""The MFU numerator counts the weights the model really has."""

from __future__ import annotations

import pytest

from wamdiff2_ros.model.backbone import build_model, count_parameters
from wamdiff2_ros.training.throughput import mfu, text_matrix_params, train_step_flops, vision_matrix_params


@pytest.mark.parametrize("preset", ["tiny", "2b"])
def test_matrix_weights_plus_embedding_cover_the_model(preset):
    model = build_model(preset, device="meta")
    config = model.config
    embedding = config.text_config.vocab_size * config.text_config.hidden_size
    counted = text_matrix_params(config) + vision_matrix_params(config) + embedding
    # what is left out: norms, biases, the vision merger and position table (a few percent at most)
    assert 0.93 * count_parameters(model) <= counted <= count_parameters(model)


def test_flops_are_six_per_weight_and_token_plus_attention_and_head():
    config = build_model("tiny", device="meta").config
    one = train_step_flops(config, [100], head_positions=0, image_patches=[])
    two = train_step_flops(config, [100, 100], head_positions=0, image_patches=[])
    assert two == pytest.approx(2 * one)
    assert one > 6 * text_matrix_params(config) * 100
    with_head = train_step_flops(config, [100], head_positions=10, image_patches=[])
    assert with_head - one == pytest.approx(
        6 * config.text_config.hidden_size * config.text_config.vocab_size * 10
    )
    assert mfu(1e12, 1.0, "cpu") is None
    assert mfu(989e12, 1.0, "NVIDIA H200") == pytest.approx(1.0)
