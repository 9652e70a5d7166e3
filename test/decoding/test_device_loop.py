"""The device loop (grammar, sampling and commit as device tensor ops) run eagerly on the CPU is the twin of
the host block loop over the same static cache, and of the eager transformers decoder; the fast engine
builds each decoder once and keeps it."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode, detection_grammar, planning_grammar
from wamdiff2_ros.decoding.fast import FastDecoder, FastEngine
from wamdiff2_ros.model.prompt import build_planning_prompt

SETTINGS = [
    pytest.param({"grammar": True}, id="grammar-greedy"),
    pytest.param(
        {"grammar": True, "temperature": 1.5, "candidates": 3, "greedy_first": True, "seed": 5},
        id="grammar-sampled-K3",
    ),
    pytest.param(
        {"grammar": True, "commit_rule": "low_confidence_static", "temperature": 1.0, "candidates": 2},
        id="grammar-static",
    ),
    pytest.param({"grammar": True, "commit_rule": "sequential", "cache_order": "reference"}, id="sequential"),
    pytest.param({"temperature": 1.0, "candidates": 2, "seed": 9}, id="free-sampled"),
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_device_loop_gives_the_host_loop_and_the_eager_tokens(
    tiny_model, tokenizer, planning_prompt, settings
):
    config = DecodeConfig(block_size=16, steps=4, max_new_tokens=96, threshold=0.05, **settings)
    grammar = planning_grammar(tokenizer, config) if config.grammar else None
    eager = decode(tiny_model, tokenizer, planning_prompt, config, grammar)
    fast = DecodeConfig(**{**config.__dict__, "backend": "sdpa"})
    results = {
        loop: FastDecoder(tiny_model, fast, planning_prompt.length, device_loop=loop == "device").decode(
            tokenizer, planning_prompt, grammar
        )
        for loop in ("host", "device")
    }
    for result in results.values():
        assert [c.token_ids for c in result.candidates] == [c.token_ids for c in eager.candidates]
        assert result.steps_per_block == eager.steps_per_block
        for candidate, twin in zip(result.candidates, eager.candidates, strict=True):
            np.testing.assert_allclose(candidate.token_probabilities, twin.token_probabilities, rtol=1e-4)
    for candidate in eager.candidates:
        probabilities = np.array(candidate.token_probabilities)
        assert len(probabilities) == len(candidate.token_ids) and np.all(
            (probabilities > 0) & (probabilities <= 1)
        )
    if config.grammar:
        assert all(c.stopped for c in eager.candidates)


def test_device_loop_detection_with_its_grammar(tiny_model, tokenizer, front_image):
    from wamdiff2_ros.model.prompt import build_prompt, detection_user_text

    prompt = build_prompt(tokenizer, detection_user_text(), front_image)
    config = DecodeConfig(block_size=16, steps=4, max_new_tokens=96, grammar=True, threshold=0.05)
    grammar = detection_grammar(tokenizer, config, ("car", "truck"))
    eager = decode(tiny_model, tokenizer, prompt, config, grammar)
    fast = DecodeConfig(**{**config.__dict__, "backend": "sdpa"})
    device = FastDecoder(tiny_model, fast, prompt.length, device_loop=True).decode(tokenizer, prompt, grammar)
    assert [c.token_ids for c in device.candidates] == [c.token_ids for c in eager.candidates]
    np.testing.assert_allclose(
        device.candidates[0].token_probabilities, eager.candidates[0].token_probabilities, rtol=1e-4
    )


def test_greedy_first_keeps_row_zero_greedy(tiny_model, tokenizer, planning_prompt):
    base = {"block_size": 16, "steps": 4, "max_new_tokens": 96, "grammar": True, "threshold": 0.05}
    greedy = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(**base))
    mixed = decode(
        tiny_model,
        tokenizer,
        planning_prompt,
        DecodeConfig(**base, temperature=1.5, candidates=3, greedy_first=True),
    )
    assert mixed.candidates[0].token_ids == greedy.candidates[0].token_ids
    assert len({c.token_ids for c in mixed.candidates}) > 1


def test_engine_builds_once_across_frames_of_one_camera(tiny_model, tokenizer, front_image):
    engine = FastEngine(tiny_model)
    config = DecodeConfig(
        block_size=16, steps=4, max_new_tokens=96, grammar=True, backend="sdpa", candidates=2
    )
    grammar = planning_grammar(tokenizer, config)
    for frame, speed in enumerate((3.0, 12.5, 7.25)):  # ego numbers change the prompt length a little
        prompt = build_planning_prompt(tokenizer, front_image, "straight", (speed, 0.1), (0.2, -0.01))
        engine.decode(tokenizer, prompt, DecodeConfig(**{**config.__dict__, "seed": frame}), grammar)
        assert engine.builds == 1  # one cache (and its graphs, on a GPU) for every frame and seed
    wide_image = np.tile(front_image, (2, 4, 1))  # a second camera size: 96 visual tokens instead of 20
    for _ in range(2):
        wide = build_planning_prompt(tokenizer, wide_image, "straight", (1.0, 0.0), (0.0, 0.0))
        engine.decode(tokenizer, wide, config, grammar)
        assert engine.builds == 2


def test_both_loops_score_through_the_fp8_lm_head_alike(tiny_model, tokenizer, planning_prompt):
    # W8A8 without a grammar: every step scores the whole vocabulary through the FP8 head (fp8.answer_logits)
    config = DecodeConfig(
        block_size=16, steps=4, max_new_tokens=96, threshold=0.05, temperature=1.0, candidates=2, seed=9,
        backend="sdpa", weights="fp8",
    )  # fmt: skip
    decoders = {
        loop: FastDecoder(tiny_model, config, planning_prompt.length, device_loop=loop == "device")
        for loop in ("host", "device")
    }
    assert all(decoder.cache.fp8_head is not None for decoder in decoders.values())
    host, device = (decoder.decode(tokenizer, planning_prompt) for decoder in decoders.values())
    assert [c.token_ids for c in device.candidates] == [c.token_ids for c in host.candidates]
    assert host.candidates[0].token_ids
