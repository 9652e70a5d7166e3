"""Weighted box fusion of K answers: agreement keeps the score, a lone box is divided by K, an answer's own
boxes and boxes of other labels never merge, and one answer passes through unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.model.box_fusion import ScoredBoxes, fuse_boxes


def answer(*boxes: tuple[float, float, float, float, float], label: str = "car") -> ScoredBoxes:
    return ScoredBoxes(
        np.array([b[:4] for b in boxes], dtype=np.float64).reshape(-1, 4),
        tuple(label for _ in boxes),
        tuple(b[4] for b in boxes),
    )


def test_one_answer_passes_through_unchanged():
    only = answer((0, 0, 10, 10, 0.3), (5, 5, 12, 12, 0.9))
    assert fuse_boxes([only]) is only


def test_agreeing_boxes_average_by_score_and_a_lone_box_keeps_a_kth_of_its_score():
    fused = fuse_boxes([answer((0, 0, 10, 10, 0.75), (50, 50, 60, 60, 0.4)), answer((2, 0, 12, 10, 0.25))])
    assert fused.scores == pytest.approx((0.5, 0.2))
    np.testing.assert_allclose(fused.boxes, [[0.5, 0, 10.5, 10], [50, 50, 60, 60]])


def test_an_answers_own_boxes_and_other_labels_never_merge():
    same_answer = fuse_boxes([answer((0, 0, 10, 10, 0.9), (1, 0, 11, 10, 0.8)), answer()])
    assert len(same_answer.scores) == 2
    labels = fuse_boxes([answer((0, 0, 10, 10, 0.9)), answer((0, 0, 10, 10, 0.9), label="truck")])
    assert sorted(labels.labels) == ["car", "truck"] and labels.scores == pytest.approx((0.45, 0.45))


def test_boxes_below_the_overlap_threshold_stay_apart_and_no_boxes_fuse_to_none():
    apart = fuse_boxes([answer((0, 0, 10, 10, 0.5)), answer((6, 0, 16, 10, 0.5))])  # IoU 0.25
    assert len(apart.scores) == 2
    empty = fuse_boxes([answer(), answer()])
    assert empty.boxes.shape == (0, 4) and empty.labels == () and empty.scores == ()
