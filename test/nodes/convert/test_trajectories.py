"""Waypoints -> PlannedTrajectory / Path: units, timing, headings; nothing non-finite gets through."""

from __future__ import annotations

import math

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from std_msgs.msg import Header

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.msg import PlannedTrajectory
from wamdiff2_ros.nodes.convert.trajectories import path, planned_trajectory, waypoints_of

HEADER = Header(stamp=Time(sec=100, nanosec=750_000_000), frame_id="base_link")
STRAIGHT = np.array([[2.0 * (i + 1), 0.0] for i in range(8)])


def test_points_carry_time_offsets_heading_and_speed() -> None:
    waypoints = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 3.0]])
    msg = planned_trajectory(HEADER, waypoints, raw_text="1.00,1.00")
    offsets = [p.time_from_start.sec + p.time_from_start.nanosec / 1e9 for p in msg.points]
    assert offsets == [0.5, 1.0, 1.5]
    assert [p.heading for p in msg.points] == pytest.approx([math.pi / 4, math.pi / 4, math.pi / 2])
    assert [p.speed for p in msg.points] == pytest.approx([2 * math.sqrt(2), 0.0, 4.0], rel=1e-6)
    assert msg.header == HEADER
    np.testing.assert_array_equal(waypoints_of(msg), waypoints)


@pytest.mark.parametrize(
    ("waypoints", "match"),
    [
        (np.array([[1.0, math.nan]]), "NaN or infinite"),
        (np.array([[math.inf, 0.0]]), "NaN or infinite"),
        (np.zeros((0, 2)), "non-empty"),
        (np.zeros((8, 3)), "\\(N, 2\\)"),
    ],
    ids=["nan", "inf", "empty", "shape"],
)
def test_malformed_waypoints_never_become_a_message(waypoints: np.ndarray, match: str) -> None:
    with pytest.raises(InputError, match=match):
        planned_trajectory(HEADER, waypoints)


def test_unknown_status_is_rejected() -> None:
    with pytest.raises(InputError, match="unknown trajectory status 7"):
        planned_trajectory(HEADER, STRAIGHT, status=7)


def test_fallback_status_and_reason_are_kept() -> None:
    msg = planned_trajectory(
        HEADER, STRAIGHT, status=PlannedTrajectory.STATUS_FALLBACK, status_reason="model answer did not parse"
    )
    assert (msg.status, msg.status_reason) == (
        PlannedTrajectory.STATUS_FALLBACK,
        "model answer did not parse",
    )


def test_path_starts_at_ego_and_stamps_each_pose() -> None:
    msg = path(HEADER, STRAIGHT)
    assert len(msg.poses) == 9 and msg.header.frame_id == "base_link"
    assert (msg.poses[0].pose.position.x, msg.poses[-1].pose.position.x) == (0.0, 16.0)
    last = msg.poses[-1].header.stamp
    assert (last.sec, last.nanosec) == (104, 750_000_000)
    assert all(p.pose.orientation.w == pytest.approx(1.0) for p in msg.poses)
