"""Fast path on the CPU: static cache + lean forward + SDPA are twins of the eager transformers decoder."""

from __future__ import annotations

import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.decoding.fast import FastDecoder
from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.static_cache import StaticBlockCache, static_max_len
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.forward import block_causal_logits, head_logits
from wamdiff2_ros.model.tokenizer import MASK_ID

RULES = ["low_confidence_dynamic", "low_confidence_static", "sequential"]


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    difference = (actual - expected).abs().max().item()
    assert difference <= tolerance, f"max |difference| {difference:.3g} > {tolerance}"


def _blocks(rows: int, size: int, count: int) -> list[torch.Tensor]:
    # Real-looking blocks: random text ids with some mask tokens, fixed by the autouse seed.
    blocks = []
    for _ in range(count):
        block = torch.randint(0, 151_000, (rows, size))
        block[:, ::3] = MASK_ID
        blocks.append(block)
    return blocks


@pytest.mark.parametrize("rows", [1, 2], ids=lambda k: f"K{k}")
def test_static_cache_logits_match_block_cache_in_both_orders(tiny_model, planning_prompt, rows):
    size = 8
    eager = BlockCache(tiny_model, size, rows)
    fast = StaticBlockCache(tiny_model, size, rows, planning_prompt.length, 32)
    first, second, third = _blocks(rows, size, 3)
    for cache in (eager, fast):
        cache.prefill(planning_prompt)
    _assert_close(
        head_logits(tiny_model, fast.denoise(first)), head_logits(tiny_model, eager.denoise(first)), 1e-5
    )
    eager.write(first)
    fast.write(first)
    fused_fast = fast.write_and_denoise(second, third)
    fused_eager = eager.write_and_denoise(second, third)
    _assert_close(head_logits(tiny_model, fused_fast), head_logits(tiny_model, fused_eager), 1e-5)
    assert fast.written == eager.written == 2 * size


@pytest.mark.parametrize("size", [1, 8], ids=lambda b: f"B{b}")
def test_flex_prompt_attention_is_the_sdpa_twin(tiny_model, planning_prompt, size):
    # FlexAttention's block mask against SDPA's boolean one: the same K/V for every prompt slot, and the
    # same logits of a block after it (a short last group when the length is not a multiple of B).
    caches = {
        name: StaticBlockCache(tiny_model, size, 1, planning_prompt.length, 16, prompt_backend=name)
        for name in ("sdpa", "flex")
    }
    block = _blocks(1, size, 1)[0]
    logits = {}
    for name, cache in caches.items():
        cache.prefill(planning_prompt)
        logits[name] = head_logits(tiny_model, cache.denoise(block))
    flex, sdpa, length = caches["flex"].cache, caches["sdpa"].cache, planning_prompt.length
    _assert_close(flex.keys[:, :, :length], sdpa.keys[:, :, :length], 1e-5)
    _assert_close(flex.values[:, :, :length], sdpa.values[:, :, :length], 1e-5)
    _assert_close(logits["flex"], logits["sdpa"], 1e-4)


def test_auto_prompt_attention_follows_each_prompts_length(tiny_model, planning_prompt, monkeypatch):
    # As on CUDA (attention.prompt_backend): flex from a length on, SDPA below; each prefill takes its own,
    # and the cache's K/V are the same either way.
    length = planning_prompt.length
    monkeypatch.setattr(
        "wamdiff2_ros.decoding.static_cache.choose_prompt_backend",
        lambda backend, device, prompt_len: "flex" if prompt_len >= length else "sdpa",
    )
    cache = StaticBlockCache(tiny_model, 8, 1, length, 16)
    cache.prefill(planning_prompt)
    flex_keys = cache.cache.keys[:, :, :length].clone()
    assert type(cache.prompt_attention).__name__ == "FlexPromptAttention"
    assert cache._prompt_attention(length - 1) is cache.prompt_attentions["sdpa"]
    fixed = StaticBlockCache(tiny_model, 8, 1, length, 16, prompt_backend="sdpa")
    fixed.prefill(planning_prompt)
    assert set(fixed.prompt_attentions) == {"sdpa"}
    _assert_close(flex_keys, fixed.cache.keys[:, :, :length], 1e-5)


def test_static_cache_logits_match_the_uncached_block_causal_forward(tiny_model, planning_prompt):
    size = 4
    first, second = _blocks(1, size, 2)
    fast = StaticBlockCache(tiny_model, size, 1, planning_prompt.length, 16)
    fast.prefill(planning_prompt)
    fast.write(first)
    cached = head_logits(tiny_model, fast.denoise(second))
    full = block_causal_logits(tiny_model, planning_prompt, torch.cat([first, second], 1), size, size)
    _assert_close(cached, full, 1e-5)


@pytest.mark.parametrize("cache_order", ["fused", "reference"])
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("block_size", [1, 8], ids=lambda b: f"B{b}")
def test_fast_decode_matches_eager_token_for_token(
    tiny_model, tokenizer, planning_prompt, block_size, rule, cache_order
):
    settings = {"block_size": block_size, "steps": 4, "commit_rule": rule, "cache_order": cache_order}
    settings["max_new_tokens"] = 16
    eager = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(**settings))
    fast = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(backend="sdpa", **settings))
    assert fast.token_ids == eager.token_ids
    assert fast.steps_per_block == eager.steps_per_block
    assert fast.forwards == eager.forwards


def test_a_decode_with_the_flex_prompt_gives_the_sdpa_prompt_tokens(tiny_model, tokenizer, planning_prompt):
    settings = {"block_size": 8, "steps": 4, "max_new_tokens": 16, "backend": "sdpa", "grammar": True}
    decoders = {
        name: FastDecoder(tiny_model, DecodeConfig(prompt_attention=name, **settings), planning_prompt.length)
        for name in ("auto", "flex")
    }
    assert type(decoders["flex"].cache.prompt_attention).__name__ == "FlexPromptAttention"
    tokens = {name: d.decode(tokenizer, planning_prompt).token_ids for name, d in decoders.items()}
    assert tokens["flex"] == tokens["auto"]


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"grammar": True, "max_new_tokens": 96}, id="greedy-grammar"),
        pytest.param({"temperature": 1.0, "seed": 3, "candidates": 3, "max_new_tokens": 32}, id="sampled-K3"),
    ],
)
def test_fast_decode_matches_eager_with_grammar_and_candidates(
    tiny_model, tokenizer, planning_prompt, grammar, settings
):
    eager = decode(
        tiny_model, tokenizer, planning_prompt, DecodeConfig(block_size=8, steps=4, **settings), grammar
    )
    config = DecodeConfig(block_size=8, steps=4, backend="sdpa", **settings)
    fast = decode(tiny_model, tokenizer, planning_prompt, config, grammar)
    assert [c.token_ids for c in fast.candidates] == [c.token_ids for c in eager.candidates]


def test_fast_decoder_reuses_its_cache_across_prompts(tiny_model, tokenizer, planning_prompt):
    config = DecodeConfig(block_size=8, steps=4, max_new_tokens=16, backend="sdpa")
    decoder = FastDecoder(tiny_model, config, planning_prompt.length)
    first, second = decoder.decode(tokenizer, planning_prompt), decoder.decode(tokenizer, planning_prompt)
    assert first.token_ids == second.token_ids
    assert first.forwards == second.forwards


def test_static_max_len_leaves_room_for_the_fused_forward():
    assert static_max_len(prompt_len=10, max_new_tokens=33, block_size=8) == 10 + 6 * 8


def test_prompt_longer_than_the_cache_is_refused(tiny_model, planning_prompt):
    cache = StaticBlockCache(tiny_model, 8, 1, planning_prompt.length - 1, 16)
    with pytest.raises(InputError, match="exceeds max_prompt_len"):
        cache.prefill(planning_prompt)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param({"backend": "xformers"}, "backend must be one of", id="unknown-backend"),
        pytest.param({"cuda_graphs": True}, "cuda_graphs needs a fast backend", id="graphs-on-eager"),
        pytest.param(
            {"decoder": "ar", "block_size": 1, "backend": "sdpa"}, "block decoder only", id="ar-fast"
        ),
        pytest.param({"prompt_attention": "flex"}, "needs a fast backend", id="flex-on-eager"),
        pytest.param(
            {"prompt_attention": "xformers", "backend": "sdpa"}, "prompt_attention must be", id="unknown"
        ),
    ],
)
def test_bad_fast_settings_are_refused(settings, message):
    with pytest.raises(InputError, match=message):
        DecodeConfig(**settings)


def test_cuda_graphs_on_a_cpu_model_are_refused(tiny_model, planning_prompt):
    with pytest.raises(InputError, match="CUDA graphs need a CUDA model"):
        StaticBlockCache(tiny_model, 8, 1, planning_prompt.length, 16, cuda_graphs=True)


def test_flashinfer_refuses_a_cpu_cache(tiny_model, planning_prompt):
    pytest.importorskip("flashinfer")
    with pytest.raises(ValueError, match="CUDA fp16/bf16"):
        StaticBlockCache(tiny_model, 8, 1, planning_prompt.length, 16, backend="flashinfer")


def test_one_fast_decoder_serves_prompts_of_different_image_sizes(tiny_model, tokenizer, planning_prompt):
    # A different image grid changes the prompt length and the M-RoPE offset; both must follow the prompt.
    import numpy as np

    from wamdiff2_ros.model.prompt import build_planning_prompt

    image = np.random.default_rng(1).integers(0, 256, size=(160, 224, 3), dtype=np.uint8)
    wide = build_planning_prompt(tokenizer, image, "left", (3.0, 0.0), (0.0, 0.0))
    config = DecodeConfig(block_size=8, steps=4, max_new_tokens=16, backend="sdpa")
    decoder = FastDecoder(tiny_model, config, max(wide.length, planning_prompt.length))
    for prompt in (wide, planning_prompt, wide):
        eager = decode(tiny_model, tokenizer, prompt, DecodeConfig(block_size=8, steps=4, max_new_tokens=16))
        assert decoder.decode(tokenizer, prompt).token_ids == eager.token_ids


@pytest.mark.parametrize(("start", "length"), [(0, 70), (40, 32), (40, 64), (200, 8)])
def test_sdpa_on_the_cpu_reads_only_the_visible_slots_and_matches_the_full_cache(start, length):
    # The CPU slices the cache to what a forward can see (and drops the mask for one block); a CUDA
    # device reads the whole cache under the mask (fixed shapes for its graphs): the same attention.
    from wamdiff2_ros.decoding.attention.sdpa import SdpaAttention
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

    cache = StaticKVCache.allocate(1, 2, 256, 2, 8, torch.float32, torch.device("cpu"))
    cache.keys.normal_()
    cache.values.normal_()
    queries = torch.randn(2, length, 4, 8)
    sliced, full = SdpaAttention(cache, 32), SdpaAttention(cache, 32)
    full.static = True
    outputs = []
    for attention in (sliced, full):
        attention.prepare(torch.tensor(start), length)
        outputs.append(attention.attend(0, queries))
    assert sliced.visible == start + length and (sliced.mask is None) == (length <= 32)
    _assert_close(outputs[0], outputs[1], 1e-6)
