"""Lean prompt prefill on the CPU: its K/V equal transformers' prefill (``BlockCache.prefill``), every row."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.prefill import PromptInputs, PromptLayouts, prompt_inputs
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import build_planning_prompt, build_prompt


def _max_kv_difference(fast: StaticBlockCache, eager: BlockCache, length: int) -> float:
    worst = 0.0
    for index, layer in enumerate(eager.cache.layers):
        for mine, theirs in ((fast.cache.keys, layer.keys), (fast.cache.values, layer.values)):
            # transformers keeps (batch, Hkv, P, D); ours is (rows, slots, Hkv, D)
            expected = theirs.transpose(1, 2)
            worst = max(worst, (mine[index, :, :length] - expected).abs().max().item())
    return worst


@pytest.mark.parametrize("block_size", [4, 8, 32], ids=lambda b: f"B{b}")
def test_lean_prefill_writes_transformers_prompt_kv_in_every_row(tiny_model, planning_prompt, block_size):
    # B = 32 leaves a short last prompt chunk (the prompt is not a multiple of 32 tokens).
    assert planning_prompt.length % 32
    eager = BlockCache(tiny_model, block_size, rows=3)
    fast = StaticBlockCache(tiny_model, block_size, 3, planning_prompt.length, 16)
    eager.prefill(planning_prompt)
    fast.prefill(planning_prompt)
    difference = _max_kv_difference(fast, eager, planning_prompt.length)
    assert difference < 1e-5, f"max |K/V difference| {difference:.3g}"
    assert fast.rope_delta == eager.rope_delta and fast.prompt_len == eager.prompt_len


def test_lean_prefill_of_a_text_only_prompt_matches_transformers(tiny_model, tokenizer):
    prompt = build_prompt(tokenizer, "Where should the car go next?", None)
    eager = BlockCache(tiny_model, 8)
    fast = StaticBlockCache(tiny_model, 8, 1, prompt.length, 16)
    eager.prefill(prompt)
    fast.prefill(prompt)
    difference = _max_kv_difference(fast, eager, prompt.length)
    assert difference < 1e-5, f"max |K/V difference| {difference:.3g}"


def test_a_second_prefill_overwrites_the_first(tiny_model, tokenizer, planning_prompt):
    # The cache is long-lived: a shorter prompt after a longer one must not see the old tail.
    text = build_prompt(tokenizer, "Stop.", None)
    fast = StaticBlockCache(tiny_model, 8, 1, planning_prompt.length, 16)
    fast.prefill(planning_prompt)
    fast.prefill(text)
    eager = BlockCache(tiny_model, 8)
    eager.prefill(text)
    block = torch.full((1, 8), 151_669)
    difference = (fast.denoise(block) - eager.denoise(block)).abs().max().item()
    assert difference < 1e-5, f"max |hidden difference| {difference:.3g}"


def _assert_inputs_equal(actual: PromptInputs, expected: PromptInputs) -> None:
    for name in ("embeds", "cos", "sin"):
        assert torch.equal(getattr(actual, name), getattr(expected, name)), name
    assert (actual.visual is None and expected.visual is None) or torch.equal(actual.visual, expected.visual)
    assert len(actual.deepstack) == len(expected.deepstack)
    assert all(torch.equal(a, b) for a, b in zip(actual.deepstack, expected.deepstack, strict=True))
    assert actual.rope_delta == expected.rope_delta


def test_prompt_layouts_are_made_once_per_layout_and_give_the_same_inputs(tiny_model, tokenizer, front_image):
    # Ego states of different text lengths, an image of another size, and a repeat of the first layout with
    # other digits and another image of its size: the cached inputs equal the uncached ones bit for bit.
    wide = np.random.default_rng(1).integers(0, 256, size=(96, 192, 3), dtype=np.uint8)
    other = np.random.default_rng(2).integers(0, 256, size=(96, 128, 3), dtype=np.uint8)
    prompts = [
        build_planning_prompt(tokenizer, front_image, "right", (4.66, -0.09), (0.17, -1.53)),
        build_planning_prompt(tokenizer, front_image, "left", (14.66, -10.09), (0.17, -1.53)),
        build_planning_prompt(tokenizer, wide, "right", (4.66, -0.09), (0.17, -1.53)),
        build_planning_prompt(tokenizer, other, "right", (5.12, -0.33), (0.41, -1.02)),
        build_prompt(tokenizer, "Where should the car go next?", None),
    ]
    assert prompts[0].length == prompts[3].length != prompts[1].length
    layouts = PromptLayouts(tiny_model)
    for prompt in prompts:
        _assert_inputs_equal(
            prompt_inputs(tiny_model, prompt, layouts=layouts), prompt_inputs(tiny_model, prompt)
        )
    assert len(layouts) == 4  # the fourth prompt reused the first one's layout
    assert layouts(prompts[3]) is layouts(prompts[0])


def test_prompt_layouts_forget_the_oldest_past_their_capacity(tiny_model, tokenizer, front_image):
    prompts = [
        build_planning_prompt(tokenizer, front_image, "right", (speed, 0.0), (0.0, 0.0))
        for speed in (1.0, 10.0)
    ]
    layouts = PromptLayouts(tiny_model, capacity=1)
    first = layouts(prompts[0])
    layouts(prompts[1])
    assert len(layouts) == 1 and layouts(prompts[0]) is not first


def test_image_tokens_and_features_that_differ_in_number_are_refused(tiny_model, planning_prompt):
    at = int(planning_prompt.mm_token_type_ids[0].nonzero()[0])
    keep = torch.ones(planning_prompt.length, dtype=torch.bool)
    keep[at] = False  # one image pad token fewer than the image has features
    short = dataclasses.replace(
        planning_prompt,
        input_ids=planning_prompt.input_ids[:, keep],
        mm_token_type_ids=planning_prompt.mm_token_type_ids[:, keep],
    )
    with pytest.raises(InputError, match="image pad tokens but"):
        prompt_inputs(tiny_model, short)
