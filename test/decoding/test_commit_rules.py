"""Commit rules pick the positions the reference picks, as pure tensor functions; a rule registered in one
file is a valid setting that every decoder runs."""

from __future__ import annotations

import pytest
import torch

from wamdiff2_ros.decoding.commit_rules import CommitRule, names, register, transfer_schedule, unregister
from wamdiff2_ros.decoding.commit_rules.base import top_k_masked
from wamdiff2_ros.decoding.commit_rules.low_confidence_dynamic import low_confidence_dynamic
from wamdiff2_ros.decoding.commit_rules.low_confidence_static import low_confidence_static
from wamdiff2_ros.decoding.commit_rules.sequential import sequential
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.errors import InputError

CONFIDENCE = torch.tensor([[0.95, 0.20, 0.91, 0.50], [0.10, 0.30, 0.20, 0.05]])
MASKED = torch.tensor([[True, True, False, True], [True, True, True, True]])


def test_dynamic_commits_every_masked_position_above_threshold_or_the_best_one():
    commit = low_confidence_dynamic(CONFIDENCE, MASKED, 0.9)
    # row 0: 0.95 is masked and above; 0.91 is above but already committed. row 1: none above, best is 0.30.
    assert commit.tolist() == [[True, False, False, False], [False, True, False, False]]


def test_dynamic_commits_nothing_in_a_row_without_masks():
    assert not low_confidence_dynamic(CONFIDENCE, torch.zeros_like(MASKED), 0.9).any()


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        pytest.param(1, [[True, False, False, False], [False, True, False, False]], id="top-1"),
        pytest.param(2, [[True, False, False, True], [False, True, True, False]], id="top-2"),
        pytest.param(9, [[True, True, False, True], [True, True, True, True]], id="more-than-left"),
    ],
)
def test_static_commits_the_most_confident_masked_positions(count, expected):
    assert low_confidence_static(CONFIDENCE, MASKED, count).tolist() == expected


def test_sequential_commits_the_leftmost_masked_positions():
    assert sequential(MASKED, 2).tolist() == [[True, True, False, False], [True, True, False, False]]


@pytest.mark.parametrize(
    ("block_size", "steps", "schedule"),
    [
        pytest.param(32, 32, [1] * 32, id="B32-S32-one-per-step"),
        pytest.param(32, 8, [4] * 8, id="B32-S8"),
        pytest.param(10, 4, [3, 3, 2, 2], id="uneven-first-steps-take-more"),
        pytest.param(4, 16, [1] * 4, id="steps-capped-at-B"),
    ],
)
def test_transfer_schedule_finishes_the_block_in_the_given_steps(block_size, steps, schedule):
    assert transfer_schedule(block_size, steps) == schedule
    assert sum(schedule) == block_size


class RightToLeft(CommitRule):
    """A toy rule, defined here and nowhere else: the right-most masked position, one per step."""

    name = "test_right_to_left"

    def schedule(self, block_size, steps):
        return [1] * block_size

    def select(self, confidence, masked, threshold, count):
        right_first = torch.arange(masked.shape[-1], dtype=torch.float32).expand(masked.shape)
        return top_k_masked(right_first, masked, count)

    def priority(self, confidence):
        return torch.arange(confidence.shape[-1], dtype=confidence.dtype).expand(confidence.shape)


@pytest.fixture
def right_to_left():
    register(RightToLeft)
    yield RightToLeft.name
    unregister(RightToLeft.name)  # other tests see the built-in rules only


def test_a_rule_registered_in_one_file_decodes_everywhere(
    tiny_model, tokenizer, planning_prompt, right_to_left
):
    assert "test_right_to_left" in names()
    settings = {"block_size": 4, "max_new_tokens": 8, "commit_rule": "test_right_to_left"}
    eager = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(**settings))
    fast = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(backend="sdpa", **settings))
    assert eager.steps_per_block[0] == 4 and fast.token_ids == eager.token_ids
    # B = 1 right to left is left to right: the AR twin's tokens.
    ar = decode(
        tiny_model, tokenizer, planning_prompt, DecodeConfig(decoder="ar", block_size=1, max_new_tokens=8)
    )
    one = decode(tiny_model, tokenizer, planning_prompt, DecodeConfig(**{**settings, "block_size": 1}))
    assert one.token_ids == ar.token_ids


def test_an_unknown_rule_and_a_taken_name_are_refused(right_to_left):
    with pytest.raises(InputError, match="commit_rule must be one of"):
        DecodeConfig(commit_rule="nope")
    with pytest.raises(InputError, match="new, non-empty name"):
        register(RightToLeft)
