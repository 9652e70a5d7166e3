"""Sampling: greedy is argmax; temperature sampling is seeded per row and never picks a -inf token."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.grammar import PlanningGrammar
from wamdiff2_ros.decoding.sampling import make_generators, sample_tokens
from wamdiff2_ros.decoding.step import BlockBudget, constrain
from wamdiff2_ros.model.tokenizer import MASK_ID


def test_greedy_picks_the_argmax_with_its_probability():
    logits = torch.tensor([[[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]]])
    x0, confidence = sample_tokens(logits, 0.0, None)
    assert x0.tolist() == [[1, 0]]
    assert torch.allclose(confidence, torch.softmax(logits, -1).amax(-1))


def test_sampling_with_the_same_seeds_repeats_and_rows_are_independent():
    logits = torch.randn(3, 5, 50)
    first, _ = sample_tokens(logits, 1.0, make_generators([1, 2, 3]))
    again, _ = sample_tokens(logits, 1.0, make_generators([1, 2, 3]))
    alone, _ = sample_tokens(logits[1:2], 1.0, make_generators([2]))
    assert torch.equal(first, again)
    assert torch.equal(first[1:2], alone)


def test_sampling_never_picks_a_forbidden_token():
    logits = torch.zeros(2, 64, 1000)
    logits[..., 500:] = float("-inf")
    x0, _ = sample_tokens(logits, 2.0, make_generators([5, 6]))
    assert int(x0.max()) < 500


def test_mask_token_is_suppressed_even_when_it_is_the_best():
    logits = torch.zeros(1, 2, 151_936)
    logits[..., MASK_ID] = 100.0
    masked = torch.ones(1, 2, dtype=torch.bool)
    budget = BlockBudget(states=None, limit=2, tokens_after=0)
    constrained = constrain(
        logits, torch.full((1, 2), MASK_ID), masked, DecodeConfig(), None, budget, MASK_ID
    )
    x0, _ = sample_tokens(constrained, 0.0, None)
    assert MASK_ID not in x0.flatten().tolist()
    # The reference's behaviour (no suppression) stays available.
    reference = DecodeConfig(suppress_mask_token=False)
    x0, _ = sample_tokens(constrain(logits, x0, masked, reference, None, budget, MASK_ID), 0.0, None)
    assert x0.flatten().tolist() == [MASK_ID, MASK_ID]


def test_grammar_columns_exclude_the_mask_token(grammar: PlanningGrammar):
    assert MASK_ID not in grammar.token_ids.tolist()
