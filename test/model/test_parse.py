"""Parsers return typed answers or a ParseError that says what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.errors import ParseError
from wamdiff2_ros.model.parse import (
    Detection,
    boxes_to_source_px,
    grounding_item_scores,
    parse_detections,
    parse_qa,
    parse_waypoints,
    salvage_detections,
)

ANSWER = "2.26,-0.17,4.43,-0.55,6.45,-1.18,8.33,-2.06,10.04,-3.17,11.69,-4.50,13.24,-6.22,15.59,-8.59"


def test_waypoints_parse_in_order_and_cut_at_eos():
    waypoints = parse_waypoints(ANSWER + "<|im_end|>9,9,9")
    assert waypoints.shape == (8, 2)
    assert waypoints[0].tolist() == [2.26, -0.17] and waypoints[-1].tolist() == [15.59, -8.59]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "empty answer", id="empty"),
        pytest.param("<|im_end|>", "empty answer", id="only-eos"),
        pytest.param("1.00,2.00", "got 2", id="too-few"),
        pytest.param(ANSWER + ",1.00", "got 17", id="too-many"),
        pytest.param(ANSWER.replace("4.43", "4.4.3"), "value 3 of 16", id="two-dots"),
        pytest.param(ANSWER.replace("4.43", "nan"), "value 3 of 16", id="nan"),
        pytest.param(ANSWER.replace("4.43", "1e9"), "value 3 of 16", id="exponent"),
        pytest.param(ANSWER.replace("-0.17", "--0.17"), "value 2 of 16", id="double-minus"),
    ],
)
def test_malformed_waypoints_are_parse_errors(text, message):
    with pytest.raises(ParseError, match=message):
        parse_waypoints(text)


def test_waypoint_bound_is_enforced_when_given():
    with pytest.raises(ParseError, match=r"value 15 = 15\.59 exceeds the bound of 15\.0 m"):
        parse_waypoints(ANSWER, max_abs_m=15.0)


def test_detections_parse_from_a_json_fence():
    items = '[{"bbox_2d": [10, 20, 110, 220], "label": "car"}, {"bbox_2d": [0, 0, 5, 5], "label": "cone"}]'
    text = f"```json\n{items}\n```"
    assert parse_detections(text) == [
        Detection("car", (10.0, 20.0, 110.0, 220.0)),
        Detection("cone", (0.0, 0.0, 5.0, 5.0)),
    ]


def test_empty_detection_list_is_valid():
    assert parse_detections("[]<|im_end|>") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('[{"bbox_2d": [1, 2, 3]', "not valid JSON", id="truncated-json"),
        pytest.param('"car"', "JSON list of objects", id="not-a-list"),
        pytest.param('[{"label": "car"}]', "detection 0 has no 'bbox_2d'", id="no-box"),
        pytest.param('[{"bbox_2d": [1, 2, 3], "label": "car"}]', "4 finite numbers", id="three-coords"),
        pytest.param('[{"bbox_2d": [5, 2, 3, 4], "label": "car"}]', "x1 > x2", id="inverted-box"),
        pytest.param('[{"bbox_2d": [1, 2, 3, 4]}]', "has no label", id="no-label"),
    ],
)
def test_malformed_detections_are_parse_errors(text, message):
    with pytest.raises(ParseError, match=message):
        parse_detections(text)


@pytest.mark.parametrize(
    ("frame", "resized", "expected"),
    [
        pytest.param("norm1000", None, [192.0, 64.8, 960.0, 540.0], id="qwen3-relative-1000"),
        pytest.param("resized_px", (960, 540), [200.0, 120.0, 1000.0, 1000.0], id="resized-pixels"),
    ],
)
def test_boxes_map_to_source_pixels(frame, resized, expected):
    boxes = boxes_to_source_px(
        [Detection("car", (100, 60, 500, 500))], (1920, 1080), frame=frame, resized_wh_px=resized
    )
    assert np.allclose(boxes[0], expected)


def test_qa_answer_is_cut_and_stripped():
    assert parse_qa("  Because the light is red. <|im_end|><|im_end|>") == "Because the light is red."


def test_empty_qa_answer_is_a_parse_error():
    with pytest.raises(ParseError, match="empty answer"):
        parse_qa(" <|im_end|>")


@pytest.mark.parametrize(
    ("text", "labels", "problem"),
    [
        pytest.param(
            '[{"bbox_2d": [1, 2, 3, 4], "label": "car"}, {"bbox_2d": [5, 2, 3, 4], "label": "car"}]',
            ["car"],
            "detection 1: box [5, 2, 3, 4] has x1 > x2",
            id="one-inverted-box",
        ),
        pytest.param(
            '[{"bbox_2d": [1, 2, 3, 4], "label": "car"}, {"bbox_2d": [5, 6, 7',
            ["car"],
            "not valid JSON",
            id="cut-off-by-the-budget",
        ),
        pytest.param("I see some cars", [], "not valid JSON", id="no-items"),
        pytest.param('[{"bbox_2d": [1, 2, 3, 4], "label": "bus"}]<|im_end|>junk', ["bus"], None, id="whole"),
    ],
)
def test_salvage_keeps_the_well_formed_items_and_names_the_rest(text, labels, problem):
    detections, problems = salvage_detections(text)
    assert [d.label for d in detections] == labels
    if problem is None:
        assert problems == [] and detections == parse_detections(text)
    else:
        assert len(problems) == 1 and problem in problems[0]


# Two items, cut as the Qwen tokenizer cuts them: the tokens that open each item and its four leading digits.
PIECES = ["[", '{"', "bbox", "_", "2", "d", '":', " [", "9", "3", ",", " ", "4", ",", " ", "9", "9", ",",
          " ", "5", "],", ' "', "label", '":', ' "', "car", '"},', ' {"', "bbox", "_", "2", "d", '":', " [",
          "1", ",", " ", "2", ",", " ", "7", ",", " ", "8", "],", ' "', "label", '":', ' "', "car", '"}',
          "]"]  # fmt: skip
TEXT = "".join(PIECES)


def test_an_item_scores_its_opening_times_its_leading_digits():
    probabilities = [1.0] * len(PIECES)
    probabilities[1] = 0.8  # '{"': the first item opens
    probabilities[4] = 0.1  # the "2" of bbox_2d is no coordinate
    probabilities[8], probabilities[9] = 0.5, 0.2  # 93: its leading digit counts, the next does not
    probabilities[26] = 0.6  # '"},': the first item closes and the answer goes on to a second
    probabilities[34] = 0.4  # the second box's "1"
    first, second = grounding_item_scores(TEXT, PIECES, probabilities)
    assert first == pytest.approx(0.8 * (0.5 + 1 + 1 + 1) / 4)
    assert second == pytest.approx(0.6 * (0.4 + 1 + 1 + 1) / 4)


def test_item_scores_need_pieces_that_spell_the_answer():
    assert grounding_item_scores(TEXT, PIECES[:-1], [1.0] * (len(PIECES) - 1)) is None
    assert grounding_item_scores(TEXT, PIECES, [1.0] * 3) is None


def test_salvage_gives_each_kept_item_its_own_score():
    swapped = TEXT.replace("[1, 2, 7, 8]", "[7, 2, 1, 8]")  # the second item's corners swapped: dropped
    for text, expected in ((TEXT, [0.9, 0.3]), (swapped, [0.9])):
        detections, _ = salvage_detections(text, [0.9, 0.3])
        assert [d.score for d in detections] == expected
    assert [d.score for d in salvage_detections(TEXT, [0.5])[0]] == [1.0, 1.0]  # not one per item: unscored
