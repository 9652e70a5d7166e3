"""Sampling: greedy is argmax; temperature sampling is seeded per row (counter-based uniforms) and never picks
a -inf token."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.grammar import PlanningGrammar
from wamdiff2_ros.decoding.sampling import RowSampling, sample_tokens, uniforms
from wamdiff2_ros.decoding.step import BlockBudget, constrain
from wamdiff2_ros.model.tokenizer import MASK_ID


def test_greedy_picks_the_argmax_with_its_probability():
    logits = torch.tensor([[[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]]])
    x0, confidence, _ = sample_tokens(logits, RowSampling.of(0.0, 0, 1, False))
    assert x0.tolist() == [[1, 0]]
    assert torch.allclose(confidence, torch.softmax(logits, -1).amax(-1))


def test_sampling_with_the_same_seeds_repeats_and_rows_are_independent():
    logits = torch.randn(3, 5, 50)
    first, _, _ = sample_tokens(logits, RowSampling.of(1.0, 1, 3, False), draw=4)
    again, _, _ = sample_tokens(logits, RowSampling.of(1.0, 1, 3, False), draw=4)
    alone, _, _ = sample_tokens(logits[1:2], RowSampling.of(1.0, 2, 1, False), draw=4)
    later, _, _ = sample_tokens(logits, RowSampling.of(1.0, 1, 3, False), draw=5)
    assert torch.equal(first, again)
    assert torch.equal(first[1:2], alone)
    assert not torch.equal(first, later)


def test_greedy_first_row_takes_the_argmax_and_the_others_sample():
    logits = torch.randn(3, 64, 50)
    x0, confidence, _ = sample_tokens(logits, RowSampling.of(1.0, 0, 3, greedy_first=True))
    assert torch.equal(x0[0], logits[0].argmax(-1))
    assert torch.allclose(confidence[0], torch.softmax(logits[0], -1).amax(-1))
    assert not torch.equal(x0[1], logits[1].argmax(-1))


def test_the_probability_is_the_models_and_the_confidence_the_drawn_distributions():
    logits = torch.randn(3, 16, 40)
    x0, confidence, probability = sample_tokens(logits, RowSampling.of(2.0, 0, 3, greedy_first=True))
    model = torch.softmax(logits, -1).gather(-1, x0[..., None]).squeeze(-1)
    tempered = torch.softmax(logits / 2.0, -1).gather(-1, x0[..., None]).squeeze(-1)
    assert torch.equal(probability, model)
    assert torch.equal(confidence[0], model[0]) and torch.equal(confidence[1:], tempered[1:])


def test_uniforms_are_in_the_unit_interval_and_look_uniform():
    values = uniforms(torch.arange(64), torch.tensor(3), 64)
    assert values.dtype == torch.float64 and float(values.min()) >= 0.0 and float(values.max()) < 1.0
    assert abs(float(values.mean()) - 0.5) < 0.01 and abs(float(values.var()) - 1 / 12) < 0.005
    assert len(set(values.flatten().tolist())) == values.numel()


def test_sampling_never_picks_a_forbidden_token():
    logits = torch.zeros(2, 64, 1000)
    logits[..., 500:] = float("-inf")
    x0, _, _ = sample_tokens(logits, RowSampling.of(2.0, 5, 2, False))
    assert int(x0.max()) < 500


def test_mask_token_is_suppressed_even_when_it_is_the_best():
    logits = torch.zeros(1, 2, 151_936)
    logits[..., MASK_ID] = 100.0
    masked = torch.ones(1, 2, dtype=torch.bool)
    budget = BlockBudget(states=None, limit=2, tokens_after=0)
    constrained = constrain(
        logits, torch.full((1, 2), MASK_ID), masked, DecodeConfig(), None, budget, MASK_ID
    )
    x0, _, _ = sample_tokens(constrained, RowSampling.of(0.0, 0, 1, False))
    assert MASK_ID not in x0.flatten().tolist()
    # The reference's behaviour (no suppression) stays available.
    reference = DecodeConfig(suppress_mask_token=False)
    greedy = RowSampling.of(0.0, 0, 1, False)
    x0, _, _ = sample_tokens(constrain(logits, x0, masked, reference, None, budget, MASK_ID), greedy)
    assert x0.flatten().tolist() == [MASK_ID, MASK_ID]


def test_grammar_columns_exclude_the_mask_token(grammar: PlanningGrammar):
    assert MASK_ID not in grammar.token_ids.tolist()
