"""``torch.compile`` of the fast path on the CPU: compiled pieces are twins of the uncompiled lean code.

Inductor compiles for the CPU too (a C++ compiler is needed); the tiny preset keeps each compile to seconds.
"""

from __future__ import annotations

import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.device_loop import block_end, step_tail
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.decoding.fast import FastDecoder
from wamdiff2_ros.decoding.fast_model import LeanDecoder, compiled
from wamdiff2_ros.decoding.sampling import RowSampling
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.tokenizer import MASK_ID

ROWS, SIZE = 2, 8


@pytest.fixture(scope="module")
def compiled_decoder(tiny_model):
    return LeanDecoder(tiny_model, compile=True)


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    difference = (actual - expected).abs().max().item()
    assert difference <= tolerance, f"max |difference| {difference:.3g} > {tolerance}"


def test_compiled_forward_matches_the_lean_forward_in_both_orders(
    tiny_model, planning_prompt, compiled_decoder
):
    blocks = [torch.randint(0, 151_000, (ROWS, SIZE)) for _ in range(3)]
    blocks[2][:, ::2] = MASK_ID
    caches = {
        name: StaticBlockCache(tiny_model, SIZE, ROWS, planning_prompt.length, 32, decoder=decoder)
        for name, decoder in (("eager", LeanDecoder(tiny_model)), ("compiled", compiled_decoder))
    }
    logits = {}
    for name, cache in caches.items():
        cache.prefill(planning_prompt)
        cache.write(blocks[0])
        logits[name] = head_logits(tiny_model, cache.write_and_denoise(blocks[1], blocks[2]))
    _assert_close(logits["compiled"], logits["eager"], 1e-5)
    _assert_close(caches["compiled"].cache.keys, caches["eager"].cache.keys, 1e-5)
    _assert_close(caches["compiled"].cache.values, caches["eager"].cache.values, 1e-5)


@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_static"])
def test_compiled_fast_decode_gives_the_eager_tokens(
    tiny_model, tokenizer, planning_prompt, compiled_decoder, rule
):
    settings = {"block_size": SIZE, "steps": 4, "commit_rule": rule, "candidates": ROWS, "max_new_tokens": 16}
    settings["temperature"], settings["seed"] = 1.0, 3  # K distinct rows
    eager = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(**settings))
    config = DecodeConfig(backend="sdpa", compile=True, **settings)
    fast = FastDecoder(tiny_model, config, planning_prompt.length, compiled_decoder).decode(
        tokenizer, planning_prompt
    )
    assert [c.token_ids for c in fast.candidates] == [c.token_ids for c in eager.candidates]
    assert fast.steps_per_block == eager.steps_per_block


@pytest.mark.parametrize(
    ("rule", "count", "head"),
    [
        ("low_confidence_dynamic", None, "bf16"), ("low_confidence_static", 2, "bf16"),
        ("sequential", 3, "bf16"), ("low_confidence_dynamic", None, "fp8"),
    ],
)  # fmt: skip
def test_compiled_step_tail_matches_the_uncompiled_one(tiny_model, rule, count, head):
    # The device loop's LM head (the model's, or FP8: fp8.answer_logits) + sampling + commit
    # (device_loop.step_tail), one greedy row, one sampled.
    config = DecodeConfig(block_size=SIZE, steps=4, commit_rule=rule, threshold=0.02)
    hidden = torch.randn(ROWS, SIZE, tiny_model.config.text_config.hidden_size)
    tokens = torch.full((ROWS, SIZE), MASK_ID)
    tokens[0, :3] = 7
    masked = tokens == MASK_ID
    budget = (torch.zeros(ROWS, dtype=torch.int64), torch.tensor(SIZE), torch.tensor(0))
    sampling = RowSampling.of(1.0, 3, ROWS, greedy_first=True)
    draw = torch.tensor(2)
    probability = torch.ones(ROWS, SIZE)
    arguments = (hidden, tokens, masked, probability, config, None, budget, sampling, draw, MASK_ID, count)
    with torch.no_grad():
        fp8_head = LeanDecoder(tiny_model, weights="fp8").head if head == "fp8" else None
        eager, fast = (tail(tiny_model, fp8_head, *arguments) for tail in (step_tail, compiled(step_tail)))
    names = ("tokens", "masked", "probability", "x0", "x0_probability", "logits", "counted", "dead")
    for name, expected, actual in zip(names, eager, fast, strict=True):
        if expected is not None and expected.is_floating_point():  # Inductor's softmax: a rounding apart
            torch.testing.assert_close(actual, expected, msg=name)
        else:
            assert (actual is expected is None) or torch.equal(actual, expected), name
    assert int(eager[6]) == 1 and bool((eager[1] != masked).any())  # the step committed something
    assert bool((eager[2] < 1).any())  # and its tokens carry their probabilities


def test_compiled_block_end_fills_as_the_uncompiled_one(tokenizer):
    # The device loop's block end with a grammar (leftover fill, its probabilities, the automaton state).
    from wamdiff2_ros.decoding.device_grammar import DeviceGrammar
    from wamdiff2_ros.decoding.engine import planning_grammar

    grammar = DeviceGrammar(planning_grammar(tokenizer, DecodeConfig(max_new_tokens=128)), "cpu", MASK_ID)
    generator = torch.Generator().manual_seed(4)
    states = torch.zeros(ROWS, dtype=torch.int64)
    tokens = torch.full((ROWS, SIZE), MASK_ID)
    masked = torch.ones(ROWS, SIZE, dtype=torch.bool)
    budget = (states, torch.tensor(SIZE), torch.tensor(96))
    allowed = grammar.allowed(states, tokens, masked, budget[1], budget[2])
    logits = torch.randn(ROWS, SIZE, grammar.num_columns, generator=generator).masked_fill(
        ~allowed, -torch.inf
    )
    x0 = grammar.token_ids[logits.argmax(-1)]
    x0_probability = torch.softmax(logits, -1).amax(-1)
    arguments = (grammar, logits, x0, x0_probability, tokens, masked, torch.ones(ROWS, SIZE), budget)
    finished = torch.zeros(ROWS, dtype=torch.bool)
    eager, fast = (end(*arguments, finished, 151645) for end in (block_end, compiled(block_end)))
    assert torch.equal(fast[0], eager[0]) and torch.equal(fast[2], eager[2])  # tokens, automaton states
    torch.testing.assert_close(fast[1], eager[1])  # the filled tokens' probabilities
    assert bool((eager[1] < 1).all())


def test_a_shared_decoder_must_match_the_compile_and_weights_settings(tiny_model, planning_prompt):
    config = DecodeConfig(backend="sdpa", compile=True)
    with pytest.raises(InputError, match=r"\(False, 'bf16'\), the config \(True, 'bf16'\)"):
        FastDecoder(tiny_model, config, planning_prompt.length, LeanDecoder(tiny_model))
    with pytest.raises(InputError, match="'fp8'"):
        FastDecoder(tiny_model, DecodeConfig(backend="sdpa", weights="fp8"), 64, LeanDecoder(tiny_model))


def test_compile_on_the_eager_backend_is_refused():
    with pytest.raises(InputError, match="compile needs a fast backend"):
        DecodeConfig(compile=True)


def test_compiled_prefill_takes_any_prompt_length(tiny_model, tokenizer, planning_prompt, compiled_decoder):
    # The prompt's length follows the ego numbers and the image: one dynamic-shape compile serves them all.
    from wamdiff2_ros.model.prompt import build_prompt

    prompts = [
        planning_prompt,
        build_prompt(tokenizer, "Where to?", None),
        build_prompt(tokenizer, "Stop.", None),
    ]
    assert len({p.length for p in prompts}) == 3
    for prompt in prompts:
        eager = StaticBlockCache(tiny_model, SIZE, 1, prompt.length, 16, decoder=LeanDecoder(tiny_model))
        fast = StaticBlockCache(tiny_model, SIZE, 1, prompt.length, 16, decoder=compiled_decoder)
        eager.prefill(prompt)
        fast.prefill(prompt)
        _assert_close(fast.cache.keys[:, :, : prompt.length], eager.cache.keys[:, :, : prompt.length], 1e-5)
        _assert_close(
            fast.cache.values[:, :, : prompt.length], eager.cache.values[:, :, : prompt.length], 1e-5
        )
