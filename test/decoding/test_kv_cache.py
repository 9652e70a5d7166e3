"""The block KV cache gives the logits of one full block-causal forward, in both cache orders."""

from __future__ import annotations

import pytest
import torch

from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.model.forward import block_causal_logits, head_logits
from wamdiff2_ros.model.tokenizer import MASK_ID

TOLERANCE = 1e-5  # fp32


def _partially_masked(tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    keep = torch.rand(tokens.shape, generator=generator) < 0.5
    return torch.where(keep, tokens, MASK_ID)


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    worst = float((actual - expected).abs().max())
    assert worst <= TOLERANCE, f"{what}: max |logit difference| {worst:.3e} > {TOLERANCE}"


@pytest.mark.parametrize("block_size", [1, 4, 8, 32], ids=lambda b: f"B{b}")
def test_cached_denoise_logits_equal_full_block_causal_forward(tiny_model, planning_prompt, block_size):
    generator = torch.Generator().manual_seed(block_size)
    rows, blocks = 2, 3
    final = torch.randint(0, 151_000, (rows, blocks * block_size), generator=generator)
    cache = BlockCache(tiny_model, block_size, rows)
    cache.prefill(planning_prompt)
    for index in range(blocks):
        span = slice(index * block_size, (index + 1) * block_size)
        noisy = _partially_masked(final[:, span], generator)
        sequence = torch.cat([final[:, : span.start], noisy], dim=1)
        expected = block_causal_logits(tiny_model, planning_prompt, sequence, block_size)[:, span]
        with torch.no_grad():
            actual = head_logits(tiny_model, cache.denoise(noisy))
        _assert_close(actual, expected, f"block {index} denoise")
        cache.write(final[:, span])
    assert cache.written == blocks * block_size


@pytest.mark.parametrize("block_size", [1, 4, 32], ids=lambda b: f"B{b}")
def test_fused_write_and_denoise_equals_full_forward(tiny_model, planning_prompt, block_size):
    generator = torch.Generator().manual_seed(100 + block_size)
    final = torch.randint(0, 151_000, (1, 3 * block_size), generator=generator)
    cache = BlockCache(tiny_model, block_size)
    cache.prefill(planning_prompt)
    cache.denoise(torch.full((1, block_size), MASK_ID))
    for index in range(1, 3):
        committed = final[:, (index - 1) * block_size : index * block_size]
        noisy = _partially_masked(final[:, index * block_size : (index + 1) * block_size], generator)
        sequence = torch.cat([final[:, : index * block_size], noisy], dim=1)
        expected = block_causal_logits(tiny_model, planning_prompt, sequence, block_size)[:, -block_size:]
        with torch.no_grad():
            actual = head_logits(tiny_model, cache.write_and_denoise(committed, noisy))
        _assert_close(actual, expected, f"fused block {index}")
        assert cache.written == index * block_size


def test_denoise_leaves_the_cache_unchanged(tiny_model, planning_prompt):
    cache = BlockCache(tiny_model, 8)
    cache.prefill(planning_prompt)
    cache.write(torch.arange(8)[None])
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.cache.layers]
    cache.denoise(torch.full((1, 8), MASK_ID))
    after = [(layer.keys, layer.values) for layer in cache.cache.layers]
    assert all(
        torch.equal(k0, k1) and torch.equal(v0, v1) for (k0, v0), (k1, v1) in zip(before, after, strict=True)
    )


def test_prompt_cache_depends_on_block_size(tiny_model, planning_prompt):
    # The prompt itself is block-causal in B-sized chunks (reference pitfall 5): B = 1 and B = 32 differ.
    keys = []
    for block_size in (1, 32):
        cache = BlockCache(tiny_model, block_size)
        cache.prefill(planning_prompt)
        keys.append(cache.cache.layers[1].keys)
    assert not torch.allclose(keys[0], keys[1])


def test_prefill_counts_one_forward_and_shares_the_prompt_across_rows(tiny_model, planning_prompt):
    cache = BlockCache(tiny_model, 8, rows=3)
    cache.prefill(planning_prompt)
    keys = cache.cache.layers[0].keys
    assert cache.forwards == 1 and keys.shape[0] == 3
    assert torch.equal(keys[0], keys[2])
