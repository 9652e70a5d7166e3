"""The detection debug image: each box drawn with its label, and its score when the answer has scores."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.nodes.markers import draw_boxes


def test_boxes_are_drawn_on_a_copy_with_or_without_scores():
    frame = np.zeros((60, 120, 3), dtype=np.uint8)
    boxes = np.array([[10.0, 20.0, 50.0, 40.0]])
    plain = draw_boxes(frame, boxes, ("car",))
    scored = draw_boxes(frame, boxes, ("car",), (0.42,))
    assert not frame.any() and plain.any() and scored.any()  # the frame itself is left as it was
    assert not np.array_equal(plain, scored)  # the caption "car 0.42" is longer than "car"
    with pytest.raises(ValueError):
        draw_boxes(frame, boxes, ("car",), (0.1, 0.2))
