"""Samples as the reference's JSON training records (planning, detection, QA) and as ground-truth lines.

A record is ``{datasource, id, image: [path], conversations: [{from: human, value}, {from: gpt, value}]}``
(WAM-Diff2 README.md:103-125). The planning turn is ``model.prompt``'s text, verbatim; detection answers are
Qwen3-VL grounding JSON with coordinates on its 0..1000 scale of the image (``model.parse``'s default
``norm1000`` frame); pixel boxes stay in the ground-truth lines. Rendering and simulation happen elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from wamdiff2_ros.model.plan_frame import DEFAULT_PLAN_FRAME, plan_in_frame
from wamdiff2_ros.model.prompt import (
    IMAGE_PLACEHOLDER,
    detection_user_text,
    format_waypoints,
    planning_user_text,
)
from wamdiff2_ros.sim.expert import AgentFutures, GroundTruth

DATASOURCE = "wamdiff2_sim"
NORM_SCALE = 1000  # Qwen3-VL writes boxes relative to the image on a 0..1000 scale


def record(sample_id: str, image_path: str, user_text: str, answer: str) -> dict:
    """One reference-format record with a single image and one human/gpt exchange."""
    return {
        "datasource": DATASOURCE,
        "id": sample_id,
        "image": [image_path],
        "conversations": [{"from": "human", "value": user_text}, {"from": "gpt", "value": answer}],
    }


def planning_record(
    sample_id: str,
    image_path: str,
    truth: GroundTruth,
    min_int_digits: int = 1,
    plan_frame: str = DEFAULT_PLAN_FRAME,
) -> dict:
    """The planning record: the reference prompt with command and telemetry, answer ``x1,y1,...,x8,y8``
    (``min_int_digits`` 2: the padded number style, ``model.prompt.format_waypoints``) in ``plan_frame``
    (``model.plan_frame``: ``route`` writes each waypoint as s, d along ``truth.route_ego_m``)."""
    user_text = planning_user_text(
        truth.command,
        truth.velocity_ego_mps,
        truth.accel_ego_mps2,
        truth.command_distance_m,
        truth.route_ahead_m,
    )
    values = plan_in_frame(truth.waypoints_ego, plan_frame, truth.route_ego_m)
    return record(sample_id, image_path, user_text, format_waypoints(values, min_int_digits))


def format_detections(boxes_px: np.ndarray, labels: Sequence[str], image_wh_px: tuple[int, int]) -> str:
    """Qwen3-VL grounding answer ``[{"bbox_2d": [x1, y1, x2, y2], "label": "car"}, ...]``, 0..1000 scale.

    Args:
        boxes_px: (M, 4) boxes in pixels of the image, listed in answer order (nearest first from ``expert``).
        labels: one label per box.
        image_wh_px: (width, height) of the image the boxes are in.
    """
    scale = np.array([NORM_SCALE / image_wh_px[0], NORM_SCALE / image_wh_px[1]] * 2)
    items = [
        {"bbox_2d": [round(float(v)) for v in box * scale], "label": label}
        for box, label in zip(np.asarray(boxes_px, dtype=np.float64).reshape(-1, 4), labels, strict=True)
    ]
    return json.dumps(items)


def detection_record(
    sample_id: str, image_path: str, truth: GroundTruth, image_wh_px: tuple[int, int]
) -> dict:
    """The detection record for the same image (``image_wh_px``: its width and height)."""
    answer = format_detections(truth.boxes_px, truth.labels, image_wh_px)
    return record(sample_id, image_path, detection_user_text(), answer)


def qa_records(sample_id: str, image_path: str, truth: GroundTruth) -> list[dict]:
    """One record per scene-fact question; ids get ``_qa<k>`` appended."""
    return [
        record(f"{sample_id}_qa{k}", image_path, f"{IMAGE_PLACEHOLDER}\n{question}", answer)
        for k, (question, answer) in enumerate(truth.qa)
    ]


def _rounded(array: np.ndarray) -> list:
    """Nested lists rounded to millimetres; NaN (a vehicle that left the scene) becomes null."""
    values = np.round(np.asarray(array, dtype=np.float64), 3)
    out = values.astype(object)
    out[np.isnan(values)] = None
    return out.tolist()


def ground_truth_line(sample_id: str, image_path: str, truth: GroundTruth) -> dict:
    """Everything open-loop evaluation needs beyond the records, as one JSON-serialisable dict."""
    return {
        "id": sample_id,
        "image": image_path,
        "command": truth.command,
        "command_distance_m": truth.command_distance_m,
        "route_ahead_m": None if truth.route_ahead_m is None else _rounded(truth.route_ahead_m),
        "route_ego_m": None if truth.route_ego_m is None else _rounded(truth.route_ego_m),
        "velocity_ego_mps": _rounded(truth.velocity_ego_mps),
        "accel_ego_mps2": _rounded(truth.accel_ego_mps2),
        "waypoints_ego": _rounded(truth.waypoints_ego),
        "agents_poses_ego": _rounded(truth.agents.poses_ego),
        "agents_current_ego": _rounded(truth.agents.current_ego),
        "agents_sizes_m": _rounded(truth.agents.sizes_m),
        "drivable_ego": [_rounded(p) for p in truth.drivable_ego],
        "boxes_px": _rounded(truth.boxes_px),
        "labels": list(truth.labels),
        "qa": [list(pair) for pair in truth.qa],
    }


def _array(values: list, shape_tail: tuple[int, ...]) -> np.ndarray:
    """Nested lists (null as NaN) to a float array; with ``shape_tail`` the leading axis may be empty."""
    array = np.array(values, dtype=np.float64)  # None becomes NaN
    return array.reshape(-1, *shape_tail) if shape_tail else array


def ground_truth_from_line(line: dict) -> GroundTruth:
    """Inverse of ``ground_truth_line`` (values rounded to millimetres)."""
    agents = AgentFutures(
        poses_ego=_array(line["agents_poses_ego"], (8, 3)),
        current_ego=_array(line["agents_current_ego"], (3,)),
        sizes_m=_array(line["agents_sizes_m"], (2,)),
    )
    return GroundTruth(
        command=line["command"],
        velocity_ego_mps=_array(line["velocity_ego_mps"], ()),
        accel_ego_mps2=_array(line["accel_ego_mps2"], ()),
        waypoints_ego=_array(line["waypoints_ego"], (2,)),
        agents=agents,
        drivable_ego=tuple(_array(p, (2,)) for p in line["drivable_ego"]),
        boxes_px=_array(line["boxes_px"], (4,)),
        labels=tuple(line["labels"]),
        qa=tuple((q, a) for q, a in line["qa"]),
        command_distance_m=line.get("command_distance_m"),  # absent from lines written before the rule
        route_ahead_m=None if line.get("route_ahead_m") is None else _array(line["route_ahead_m"], (2,)),
        route_ego_m=None if line.get("route_ego_m") is None else _array(line["route_ego_m"], (2,)),
    )
