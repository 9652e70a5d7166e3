"""Masks follow the reference visibility rules, checked against a plain rule-by-rule implementation."""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers import Qwen3VLTextConfig
from transformers.masking_utils import create_causal_mask

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.masks import inference_mask, training_mask, training_mask_batch


def plain_inference_visible(prompt_len: int, total_len: int, block_size: int, q: int, k: int) -> bool:
    """docs/REFERENCE.md §1.5 written out: prompt blocks of B from 0, answer blocks of B from prompt end."""

    def block(pos: int) -> int:
        if pos < prompt_len:
            return pos // block_size
        return math.ceil(prompt_len / block_size) + (pos - prompt_len) // block_size

    return block(q) >= block(k)


def plain_training_visible(prefix_len: int, response_len: int, block_size: int, q: int, k: int) -> bool:
    """Reference modeling_wam_diff2.py:150-208 rules, one `if` per rule."""

    def kind_and_block(pos: int) -> tuple[str, int]:
        if pos < prefix_len:
            return "prefix", pos // block_size
        first = math.ceil(prefix_len / block_size)
        if pos < prefix_len + response_len:
            return "clean", first + (pos - prefix_len) // block_size
        return "noisy", first + (pos - prefix_len - response_len) // block_size

    q_kind, q_block = kind_and_block(q)
    k_kind, k_block = kind_and_block(k)
    if q_kind == "prefix":
        return k_kind == "prefix" and k_block <= q_block
    if q_kind == "clean":
        return k_kind == "prefix" or (k_kind == "clean" and k_block <= q_block)
    # noisy query
    if k_kind == "prefix":
        return True
    if k_kind == "clean":
        return k_block < q_block
    return k_block == q_block


CASES = [pytest.param(seed, id=f"random-{seed}") for seed in range(12)]


@pytest.mark.parametrize("seed", CASES)
def test_inference_mask_matches_plain_rules(seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 3, 4, 8, 16, 32])
    prompt_len = rng.randint(0, 70)
    total_len = prompt_len + rng.randint(1, 70)
    mask = inference_mask(prompt_len, total_len, block_size)[0, 0]
    expected = torch.tensor(
        [
            [plain_inference_visible(prompt_len, total_len, block_size, q, k) for k in range(total_len)]
            for q in range(total_len)
        ]
    )
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("seed", CASES)
def test_cached_query_rows_are_rows_of_the_full_mask(seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 4, 8])
    prompt_len, total_len = rng.randint(1, 40), rng.randint(41, 90)
    start = rng.randint(0, total_len - 1)
    full = inference_mask(prompt_len, total_len, block_size)
    assert torch.equal(
        inference_mask(prompt_len, total_len, block_size, query_start=start), full[:, :, start:]
    )


@pytest.mark.parametrize("seed", CASES)
def test_training_mask_matches_plain_rules(seed):
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 4, 8, 16])
    prefix_len = rng.randint(0, 40)
    response_len = block_size * rng.randint(1, 4)
    mask = training_mask(prefix_len, response_len, block_size)
    size = prefix_len + 2 * response_len
    expected = torch.tensor(
        [
            [plain_training_visible(prefix_len, response_len, block_size, q, k) for k in range(size)]
            for q in range(size)
        ]
    )
    assert torch.equal(mask, expected)


def test_inference_mask_equals_transformers_block_sequence_mask():
    # A third implementation: transformers' block overlay (same non-negative id = bidirectional) on causal.
    # A prompt length that is a multiple of B makes plain pos // B the same numbering as ours.
    prompt_len, answer_len, block_size = 12, 12, 4
    total = prompt_len + answer_len
    block_ids = torch.arange(total) // block_size
    config = Qwen3VLTextConfig(hidden_size=8, num_attention_heads=1, num_key_value_heads=1, head_dim=8)
    config._attn_implementation = "sdpa"
    theirs = create_causal_mask(
        config=config,
        inputs_embeds=torch.zeros(1, total, 8),
        attention_mask=None,
        cache=None,
        position_ids=torch.arange(total)[None],
        block_sequence_ids=block_ids[None],
    )
    assert torch.equal(inference_mask(prompt_len, total, block_size), theirs)


def test_clean_queries_see_noisy_keys_only_in_collator_mode():
    plain = training_mask(3, 4, 2)
    collator = training_mask(3, 4, 2, clean_sees_noisy=True)
    clean_rows, noisy_cols = slice(3, 7), slice(7, 11)
    assert not plain[clean_rows, noisy_cols].any()
    assert collator[clean_rows, noisy_cols].any()
    noisy_rows = slice(7, 11)
    assert torch.equal(plain[noisy_rows], collator[noisy_rows])  # noisy queries never change


def test_noisy_copy_never_sees_its_own_clean_block():
    mask = training_mask(5, 8, 4)
    # noisy block 0 is rows 13..16; its clean copy is columns 5..8
    assert not mask[13:17, 5:9].any()
    assert mask[17:21, 5:9].all()  # noisy block 1 sees clean block 0


def test_batch_padding_is_invisible_and_pad_rows_see_themselves():
    masks = training_mask_batch([3, 5], [4, 2], 2, total_len=14)
    assert masks.shape == (2, 1, 14, 14)
    assert torch.equal(masks[1, 0, :9, :9], training_mask(5, 2, 2))
    assert not masks[1, 0, :9, 9:].any()
    assert torch.equal(masks[1, 0, 9:, 9:], torch.eye(5, dtype=torch.bool))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: training_mask(3, 5, 4), "multiple of block size", id="unpadded-response"),
        pytest.param(lambda: inference_mask(3, 5, 0), "block_size must be at least 1", id="zero-block"),
        pytest.param(
            lambda: training_mask_batch([3], [4], 2, total_len=8), "more than total_len", id="overflow"
        ),
    ],
)
def test_bad_mask_sizes_are_input_errors(call, message):
    with pytest.raises(InputError, match=message):
        call()
