"""Commit rules pick the positions the reference picks, as pure tensor functions."""

from __future__ import annotations

import pytest
import torch

from wamdiff2_ros.decoding.commit_rules import (
    low_confidence_dynamic,
    low_confidence_static,
    sequential,
    transfer_schedule,
)

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
