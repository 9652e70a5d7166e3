"""Presets build the intended Qwen3-VL shapes; the large ones are checked on the meta device only."""

from __future__ import annotations

import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.backbone import build_model, count_parameters
from wamdiff2_ros.model.presets import QWEN_VOCAB_SIZE, preset_config


@pytest.mark.parametrize(
    ("name", "parameters", "vision_parameters"),
    [
        pytest.param("2b", 2_127_532_032, 406_957_056, id="2b-matches-qwen3-vl-2b"),
        pytest.param("8b", 8_767_123_696, 576_388_336, id="8b-matches-qwen3-vl-8b"),
    ],
)
def test_large_preset_has_published_parameter_count(name, parameters, vision_parameters):
    model = build_model(name, device="meta", seed=None)
    assert count_parameters(model) == parameters
    assert count_parameters(model.model.visual) == vision_parameters


def test_2b_preset_has_the_issue_shape():
    config = preset_config("2b")
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads) == (2048, 28, 16)
    assert (text.num_key_value_heads, text.head_dim, text.vocab_size) == (8, 128, QWEN_VOCAB_SIZE)
    assert config.tie_word_embeddings
    assert (vision.depth, vision.hidden_size, vision.patch_size, vision.spatial_merge_size) == (
        24,
        1024,
        16,
        2,
    )
    assert list(vision.deepstack_visual_indexes) == [5, 11, 17]


def test_8b_preset_unties_the_head():
    model = build_model("8b", device="meta", seed=None)
    assert model.lm_head.weight is not model.model.language_model.embed_tokens.weight


def test_tiny_preset_keeps_the_real_vocabulary_and_is_small(tiny_model):
    assert tiny_model.config.text_config.vocab_size == QWEN_VOCAB_SIZE
    # The embedding (151,936 x 64) is nearly all of it; everything else is under 0.3 M parameters.
    assert count_parameters(tiny_model) - QWEN_VOCAB_SIZE * 64 < 300_000


def test_same_seed_builds_identical_weights(tiny_model):
    again = build_model("tiny", seed=0)
    first, second = tiny_model.state_dict(), again.state_dict()
    assert all((first[name] == second[name]).all() for name in first)


def test_unknown_preset_is_an_input_error():
    with pytest.raises(InputError, match="unknown model preset 'huge'"):
        preset_config("huge")
