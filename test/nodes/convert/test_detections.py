"""DetectionOutput -> Detections2D: the image's header and size, one box per label, nothing malformed."""

from __future__ import annotations

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from std_msgs.msg import Header

from wamdiff2_ros.decoding.config import Candidate, DecodeResult
from wamdiff2_ros.decoding.planner import DetectionOutput
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.nodes.convert.detections import detections_2d

HEADER = Header(stamp=Time(sec=42, nanosec=5), frame_id="camera_front")
TEXT = '[{"bbox_2d": [10, 20, 300, 400], "label": "car"}]'
RESULT = DecodeResult((Candidate((), TEXT, True, 0),), 1, (1,), 10, 0.0, 0.0)


def output(boxes, labels: tuple[str, ...], text: str = TEXT, scores=()) -> DetectionOutput:
    return DetectionOutput(np.asarray(boxes, dtype=np.float64), labels, text, RESULT, "", scores)


def test_boxes_labels_header_size_and_text_are_carried() -> None:
    msg = detections_2d(
        output([[3.0, 7.5, 96.0, 54.0], [0.0, 0.0, 1.0, 2.0]], ("car", "truck")), HEADER, (180, 320)
    )
    assert msg.header == HEADER
    assert (msg.image_width, msg.image_height) == (320, 180)
    assert msg.raw_text == TEXT
    assert [d.label for d in msg.detections] == ["car", "truck"]
    assert [(d.x_min, d.y_min, d.x_max, d.y_max) for d in msg.detections] == [
        (3.0, 7.5, 96.0, 54.0),
        (0.0, 0.0, 1.0, 2.0),
    ]
    assert all(d.score == 1.0 for d in msg.detections)  # an unscored answer


def test_each_box_carries_its_score() -> None:
    boxes = [[3.0, 7.5, 96.0, 54.0], [0.0, 0.0, 1.0, 2.0]]
    msg = detections_2d(output(boxes, ("car", "car"), scores=(0.75, 0.25)), HEADER, (180, 320))
    assert [d.score for d in msg.detections] == [0.75, 0.25]
    with pytest.raises(InputError, match="2 detection boxes but 1 scores"):
        detections_2d(output(boxes, ("car", "car"), scores=(0.75,)), HEADER, (180, 320))


@pytest.mark.parametrize("boxes", [np.zeros((0, 4)), np.zeros((0,))], ids=["(0, 4)", "(0,)"])
def test_an_answer_without_boxes_is_an_empty_message_that_keeps_the_text(boxes) -> None:
    msg = detections_2d(output(boxes, (), "not json"), HEADER, (180, 320))
    assert msg.detections == [] and msg.raw_text == "not json"
    assert (msg.image_width, msg.image_height) == (320, 180)


@pytest.mark.parametrize(
    ("boxes", "labels", "match"),
    [
        ([[0.0, 0.0, 1.0]], ("car",), r"\(N, 4\) array"),
        ([[0.0, 0.0, 1.0, 1.0]], (), "1 detection boxes but 0 labels"),
        ([[0.0, np.nan, 1.0, 1.0]], ("car",), "NaN or infinite"),
        ([[5.0, 0.0, 1.0, 1.0]], ("car",), "x_min > x_max"),
    ],
    ids=["three-coordinates", "label-missing", "nan", "corners-swapped"],
)
def test_malformed_boxes_are_refused(boxes, labels, match: str) -> None:
    with pytest.raises(InputError, match=match):
        detections_2d(output(boxes, labels), HEADER, (180, 320))
