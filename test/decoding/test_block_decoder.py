"""Block-diffusion decoding: B = 1 is AR, fused and reference cache orders agree, budgets and stops hold."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.decoding.result import finish_result
from wamdiff2_ros.model.forward import block_causal_hidden
from wamdiff2_ros.model.tokenizer import EOS_ID, MASK_ID

RULES = ["low_confidence_dynamic", "low_confidence_static", "sequential"]


def _decode(model, tokenizer, prompt, prebuilt=None, **settings):
    return decode(model, tokenizer, prompt, DecodeConfig(**settings), prebuilt)


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"max_new_tokens": 24}, id="greedy"),
        pytest.param(
            {"max_new_tokens": 24, "temperature": 1.0, "seed": 7, "candidates": 2}, id="sampled-seeded"
        ),
        pytest.param({"max_new_tokens": 96, "grammar": True}, id="greedy-grammar"),
    ],
)
def test_block_size_1_matches_ar_token_for_token(tiny_model, tokenizer, planning_prompt, grammar, settings):
    block = _decode(tiny_model, tokenizer, planning_prompt, grammar, block_size=1, **settings)
    ar = _decode(tiny_model, tokenizer, planning_prompt, grammar, decoder="ar", block_size=1, **settings)
    assert [c.token_ids for c in block.candidates] == [c.token_ids for c in ar.candidates]
    assert len(block.token_ids) > 0
    for candidate, twin in zip(block.candidates, ar.candidates, strict=True):
        np.testing.assert_allclose(candidate.token_probabilities, twin.token_probabilities, rtol=1e-5)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("block_size", [4, 8, 32], ids=lambda b: f"B{b}")
def test_fused_cache_order_matches_reference(tiny_model, tokenizer, planning_prompt, block_size, rule):
    settings = {"block_size": block_size, "steps": 8, "commit_rule": rule, "max_new_tokens": 64}
    reference = _decode(tiny_model, tokenizer, planning_prompt, cache_order="reference", **settings)
    fused = _decode(tiny_model, tokenizer, planning_prompt, cache_order="fused", **settings)
    assert fused.token_ids == reference.token_ids
    assert fused.steps_per_block == reference.steps_per_block
    # One forward fewer per block after the first: block i is written inside block i+1's first step.
    assert reference.forwards - fused.forwards == len(fused.steps_per_block) - 1


@pytest.mark.parametrize(
    ("rule", "steps", "expected"),
    [
        pytest.param("low_confidence_static", 4, (4, 4), id="static-4-steps"),
        pytest.param("sequential", 3, (3, 3), id="sequential-3-steps"),
        pytest.param("low_confidence_static", 99, (8, 8), id="static-steps-capped-at-B"),
    ],
)
def test_static_rules_finish_each_block_in_exactly_the_scheduled_steps(
    tiny_model, tokenizer, planning_prompt, rule, steps, expected
):
    result = _decode(
        tiny_model, tokenizer, planning_prompt, block_size=8, steps=steps, commit_rule=rule, max_new_tokens=16
    )
    assert result.steps_per_block == expected


def test_dynamic_rule_stops_at_the_step_cap_and_fills_leftovers(tiny_model, tokenizer, planning_prompt):
    # Random weights are never 0.9 confident: one token per step, so 3 steps leave 13 masks to fill.
    result = _decode(tiny_model, tokenizer, planning_prompt, block_size=16, steps=3, max_new_tokens=16)
    assert result.steps_per_block == (3,)
    assert len(result.token_ids) == 16 and MASK_ID not in result.token_ids


@pytest.mark.parametrize("max_new_tokens", [1, 10, 33], ids=lambda n: f"max{n}")
def test_answer_is_cut_at_max_new_tokens(tiny_model, tokenizer, planning_prompt, max_new_tokens):
    result = _decode(tiny_model, tokenizer, planning_prompt, block_size=8, max_new_tokens=max_new_tokens)
    assert len(result.token_ids) == max_new_tokens
    assert len(result.steps_per_block) == -(-max_new_tokens // 8)
    assert not result.candidates[0].stopped


def test_result_is_cut_before_the_first_eos(tokenizer):
    answer = torch.tensor([[16, 17, EOS_ID, 18, EOS_ID, 19]])
    config = DecodeConfig(max_new_tokens=6)
    probabilities = torch.tensor([[0.5, 0.25, 1.0, 0.1, 1.0, 0.2]])
    result = finish_result(tokenizer, answer, probabilities, config, EOS_ID, 1, [1], 10, 0.0, 0.0)
    assert result.token_ids == (16, 17) and result.text == "12" and result.candidates[0].stopped
    assert result.candidates[0].token_probabilities == (0.5, 0.25)


def test_decoding_stops_after_the_block_holding_eos(tiny_model, tokenizer, planning_prompt, grammar):
    result = _decode(
        tiny_model, tokenizer, planning_prompt, grammar, block_size=8, grammar=True, max_new_tokens=256
    )
    assert result.candidates[0].stopped
    # The grammar answer is under 128 tokens, so far fewer than the 32 budgeted blocks are decoded.
    assert len(result.steps_per_block) == -(-(len(result.token_ids) + 1) // 8)


def test_candidates_decode_in_one_batch_with_distinct_seeds(tiny_model, tokenizer, planning_prompt):
    batch = _decode(
        tiny_model,
        tokenizer,
        planning_prompt,
        block_size=8,
        temperature=1.0,
        seed=3,
        candidates=3,
        max_new_tokens=16,
    )
    assert [c.seed for c in batch.candidates] == [3, 4, 5]
    assert len({c.token_ids for c in batch.candidates}) == 3
    # Each row has its own generator: candidate k equals a decode alone with seed 3 + k.
    alone = _decode(
        tiny_model, tokenizer, planning_prompt, block_size=8, temperature=1.0, seed=4, max_new_tokens=16
    )
    assert batch.candidates[1].token_ids == alone.token_ids
    # One prefill and one forward per step for all rows together.
    assert batch.forwards == alone.forwards == 1 + sum(batch.steps_per_block)


def test_same_seed_gives_the_same_sampled_answer(tiny_model, tokenizer, planning_prompt):
    runs = [
        _decode(
            tiny_model, tokenizer, planning_prompt, block_size=4, temperature=0.7, seed=11, max_new_tokens=12
        )
        for _ in range(2)
    ]
    assert runs[0].token_ids == runs[1].token_ids


@pytest.fixture(scope="module")
def mask_loving_model(tiny_model, planning_prompt):
    """The tiny model with an untied head whose mask-token row points along the answer's hidden states.

    Greedy decoding then prefers the mask id almost everywhere: the worst case for suppression.
    """
    model = copy.deepcopy(tiny_model)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    hidden = block_causal_hidden(model, planning_prompt, torch.full((1, 16), MASK_ID), 8)
    direction = hidden.mean(dim=(0, 1))
    with torch.no_grad():
        model.lm_head.weight[MASK_ID] = 50.0 * direction / direction.norm() ** 2
    return model


def test_unsuppressed_decoding_emits_the_mask_token_like_the_reference(
    mask_loving_model, tokenizer, planning_prompt
):
    result = _decode(
        mask_loving_model,
        tokenizer,
        planning_prompt,
        block_size=8,
        max_new_tokens=16,
        suppress_mask_token=False,
    )
    assert MASK_ID in result.token_ids


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("block_size", [1, 4, 8, 16, 32], ids=lambda b: f"B{b}")
def test_mask_token_is_never_emitted(mask_loving_model, tokenizer, planning_prompt, block_size, rule):
    result = _decode(
        mask_loving_model,
        tokenizer,
        planning_prompt,
        block_size=block_size,
        commit_rule=rule,
        steps=4,
        max_new_tokens=32,
    )
    assert len(result.token_ids) == 32
    assert MASK_ID not in result.token_ids


def test_bf16_model_decodes_a_parsing_plan(tokenizer, planning_prompt, grammar):
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.parse import parse_waypoints

    model = build_model("tiny", seed=0, dtype="bf16")
    result = _decode(model, tokenizer, planning_prompt, grammar, block_size=32, grammar=True)
    assert parse_waypoints(result.text).shape == (8, 2)
