"""Lean prompt prefill on the CPU: its K/V equal transformers' prefill (``BlockCache.prefill``), every row."""

from __future__ import annotations

import pytest
import torch

from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.model.prompt import build_prompt


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
