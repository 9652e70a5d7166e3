"""Detection mAP through pycocotools and QA exact match on hand-made cases."""

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.detection import ImageDetections, detection_map
from wamdiff2_ros.eval.qa import exact_match, normalise_answer

TRUTH = {
    "a": ImageDetections(np.array([[10, 10, 110, 60], [200, 50, 260, 90]], float), ("car", "car")),
    "b": ImageDetections(np.array([[0, 0, 40, 40]], float), ("car",)),
    "c": ImageDetections(np.zeros((0, 4)), ()),
}


def test_perfect_detections_score_one():
    result = detection_map(TRUTH, TRUTH)
    assert result["map"] == pytest.approx(1.0) and result["ap50"] == pytest.approx(1.0)
    assert result["truth_boxes"] == 3 and result["images"] == 3


def test_no_detections_score_zero():
    assert detection_map(TRUTH, {})["map"] == 0.0


def _shifted_by_a_fifth_of_the_width(d: ImageDetections) -> ImageDetections:
    width = d.boxes_px[:, 2] - d.boxes_px[:, 0]
    shift = np.stack([width / 5, np.zeros_like(width), width / 5, np.zeros_like(width)], axis=1)
    return ImageDetections(d.boxes_px + shift, d.labels)


def test_boxes_at_iou_two_thirds_count_at_050_not_at_075():
    shifted = {k: _shifted_by_a_fifth_of_the_width(d) for k, d in TRUTH.items()}
    result = detection_map(TRUTH, shifted)  # IoU = 0.8 / 1.2
    assert result["ap50"] == pytest.approx(1.0) and result["ap75"] == pytest.approx(0.0)


def test_missing_half_the_boxes_lowers_ap():
    partial = dict(TRUTH, a=ImageDetections(TRUTH["a"].boxes_px[:1], ("car",)))
    assert 0.5 < detection_map(TRUTH, partial)["map"] < 1.0


def test_no_truth_boxes_gives_nan_and_unknown_images_are_refused():
    assert np.isnan(detection_map({"c": TRUTH["c"]}, {})["map"])
    with pytest.raises(InputError, match="unknown images"):
        detection_map({"a": TRUTH["a"]}, {"z": TRUTH["b"]})


def test_exact_match_normalises_case_space_and_period():
    assert normalise_answer("  Slow   down. ") == "slow down"
    assert exact_match(["Yes.", "no", "3"], ["yes", "yes", "3"]) == pytest.approx(2 / 3)
    with pytest.raises(InputError, match="equally many"):
        exact_match(["yes"], [])
