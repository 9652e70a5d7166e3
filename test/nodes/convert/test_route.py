"""nav_msgs/Path and odometry's pose -> the route's shape ahead that a ``branch_route`` model reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nav_msgs.msg import Odometry, Path
from std_msgs.msg import Header

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import route_ahead
from wamdiff2_ros.nodes.convert.odometry import EgoPosition, ego_position
from wamdiff2_ros.nodes.convert.route import (
    NoRouteShape,
    Route,
    path_from_points,
    route_from_path,
    route_shape_ahead,
    route_window,
)


def path(points, frame_id: str = "map") -> Path:
    return path_from_points(frame_id, np.array(points, dtype=np.float64).reshape(-1, 2))


def test_a_path_becomes_its_polyline_without_repeated_poses() -> None:
    route = route_from_path(path([(0, 0), (0, 0), (2, 0), (2, 0), (4, 1)]))
    assert route.frame_id == "map"
    np.testing.assert_array_equal(route.points_m, [[0, 0], [2, 0], [4, 1]])


@pytest.mark.parametrize(
    ("points", "frame_id", "reason"),
    [
        ([(0, 0), (math.nan, 1)], "map", "non-finite"),
        ([(1, 1), (1, 1)], "map", "two distinct poses, got 1"),
        ([], "map", "two distinct poses, got 0"),
        ([(0, 0), (2, 0)], "", "no frame_id"),
    ],
)
def test_an_unusable_path_is_refused(points, frame_id: str, reason: str) -> None:
    with pytest.raises(InputError, match=reason):
        route_from_path(path(points, frame_id))


def test_the_shape_is_the_prompt_rules_from_the_egos_position_in_the_routes_frame() -> None:
    points = [(x, 0.0) for x in range(0, 40, 2)] + [(38.0, -y) for y in range(2, 40, 2)]  # then right
    route = route_from_path(path(points))
    shape = route_shape_ahead(route, EgoPosition("map", (20.5, 1.0)))
    np.testing.assert_allclose(shape, route_ahead(np.array(points, dtype=float), np.array([20.5, 1.0])))
    assert shape[0, 1] == 0.0 and shape[-1, 1] < -10.0  # straight for 10 m, then round to the right


def test_odometry_gives_the_egos_position_in_its_own_frame() -> None:
    msg = Odometry(header=Header(frame_id="odom"))
    msg.pose.pose.position.x, msg.pose.pose.position.y = 3.0, -4.0
    assert ego_position(msg) == EgoPosition("odom", (3.0, -4.0), 0.0)  # the identity rotation: yaw 0
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(0.3), math.cos(0.3)
    assert ego_position(msg).yaw_rad == pytest.approx(0.6)
    msg.pose.pose.orientation.z = msg.pose.pose.orientation.w = 0.0  # all zeros: no rotation given
    assert ego_position(msg) == EgoPosition("odom", (3.0, -4.0), None)
    msg.pose.pose.position.y = math.inf
    assert ego_position(msg) is None


def test_the_window_is_the_route_around_the_ego_in_its_frame() -> None:
    points = [(x, 5.0) for x in range(0, 200, 2)]  # east along y = 5
    window = route_window(route_from_path(path(points)), EgoPosition("map", (50.0, 3.0), math.pi / 2))
    np.testing.assert_allclose(window[:, 0], 2.0)  # facing north, the route runs 2 m ahead, left to right
    assert window[0, 1] > 0 > window[-1, 1]
    with pytest.raises(NoRouteShape, match="orientation"):
        route_window(route_from_path(path(points)), EgoPosition("map", (50.0, 3.0)))
    with pytest.raises(NoRouteShape, match="no route"):
        route_window(None, EgoPosition("map", (50.0, 3.0), 0.0))


@pytest.mark.parametrize(
    ("route", "ego", "reason"),
    [
        (None, EgoPosition("map", (0.0, 0.0)), "no route on ~/input/route"),
        (Route("map", np.array([[0.0, 0.0], [2.0, 0.0]])), None, "no ego position"),
        (Route("map", np.array([[0.0, 0.0], [2.0, 0.0]])), EgoPosition("odom", (0.0, 0.0)), "frame 'map'"),
        (Route("map", np.array([[0.0, 0.0], [2.0, 0.0]])), EgoPosition("map", (0.0, 45.0)), "45 m from"),
    ],
)
def test_no_shape_without_a_route_the_ego_is_on(route, ego, reason: str) -> None:
    with pytest.raises(NoRouteShape, match=reason):
        route_shape_ahead(route, ego)
