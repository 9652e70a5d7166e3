"""DecodeConfig refuses bad settings and unknown keys with errors that name them."""

from __future__ import annotations

import pytest

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.errors import InputError


def test_defaults_are_the_reference_defaults():
    config = DecodeConfig()
    assert (config.block_size, config.steps, config.commit_rule, config.threshold) == (
        32,
        32,
        "low_confidence_dynamic",
        0.9,
    )
    assert (config.temperature, config.max_new_tokens) == (0.0, 128)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param({"commit_rule": "random"}, "commit_rule must be one of", id="unknown-rule"),
        pytest.param({"cache_order": "lazy"}, "cache_order must be one of", id="unknown-order"),
        pytest.param({"block_size": 0}, "block_size must be at least 1", id="zero-block"),
        pytest.param({"threshold": 1.5}, "threshold must be in", id="threshold-above-1"),
        pytest.param({"temperature": -1.0}, "temperature must be >= 0", id="negative-temperature"),
        pytest.param({"decoder": "ar", "block_size": 4}, "block_size must be 1", id="ar-with-blocks"),
        pytest.param({"max_step_m": 0.0}, "max_step_m must be > 0", id="zero-step-bound"),
    ],
)
def test_bad_setting_is_an_input_error(settings, message):
    with pytest.raises(InputError, match=message):
        DecodeConfig(**settings)


def test_unknown_key_is_an_input_error_not_ignored():
    with pytest.raises(InputError, match=r"unknown decode settings \['treshold'\]"):
        DecodeConfig.from_dict({"treshold": 0.8})
