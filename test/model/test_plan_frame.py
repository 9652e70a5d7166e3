"""Plans written along the route: the route window around the ego, and answers to ego waypoints and back."""

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.plan_frame import (
    ROUTE_AHEAD_M,
    ROUTE_BEHIND_M,
    STRAIGHT_ROAD_ROUTE_EGO,
    plan_frame_of,
    plan_in_frame,
    plan_to_ego,
    route_window_ego,
)


def _left_turn_map(radius_m: float = 12.0) -> np.ndarray:
    # 40 m north-east-bound straight, then a left quarter circle, then 60 m west: a map-frame route, 2 m apart
    straight = np.stack([np.zeros(21), np.arange(0.0, 41.0, 2.0)], 1)
    angles = np.arange(2.0 / radius_m, np.pi / 2, 2.0 / radius_m)
    arc = np.stack([-radius_m * (1 - np.cos(angles)), 40.0 + radius_m * np.sin(angles)], 1)
    exit_ = np.stack([-radius_m - np.arange(0.0, 61.0, 2.0), np.full(31, 40.0 + radius_m)], 1)
    return np.vstack([straight, arc, exit_])


def test_the_window_is_the_route_around_the_ego_in_its_frame():
    route = np.stack([np.arange(0.0, 401.0, 2.0), np.full(201, 5.0)], 1)  # east along y = 5
    window = route_window_ego(route, np.array([100.0, 3.0]), 0.0)
    np.testing.assert_allclose(window[:, 1], 2.0)  # 2 m to the ego's left
    assert window[0, 0] == pytest.approx(-ROUTE_BEHIND_M) and window[-1, 0] == pytest.approx(ROUTE_AHEAD_M)
    heading_north = route_window_ego(route, np.array([100.0, 3.0]), np.pi / 2)
    np.testing.assert_allclose(heading_north[:, 0], 2.0)  # the same route seen from a car facing north


def test_an_ego_frame_answer_is_its_waypoints():
    waypoints = np.stack([np.arange(1.0, 9.0), np.zeros(8)], 1)
    np.testing.assert_array_equal(plan_in_frame(waypoints, "ego", None), waypoints)
    np.testing.assert_array_equal(plan_to_ego(waypoints, "ego", None), waypoints)
    assert plan_frame_of(object()) == "ego"  # a model from before plans along the route


@pytest.mark.parametrize("frame", ["route", "route_offset"])
def test_a_turning_plan_along_the_route_is_straight_and_reads_back(frame):
    route_map = _left_turn_map()
    ego_xy, yaw = np.array([0.6, 30.0]), np.pi / 2 + 0.05  # 0.6 m right of the route, heading a little left
    window = route_window_ego(route_map, ego_xy, yaw)
    # the expert's plan follows the route through the turn, easing back from the car's offset to the lane
    from wamdiff2_ros.route_frame import RouteFrame

    frame_ = RouteFrame.from_points(window)
    arcs, offsets = np.arange(1, 9) * 3.0, -0.6 + np.linspace(0.0, 0.6, 8)
    waypoints = frame_.to_xy(arcs, offsets, np.zeros(2), "centreline")
    assert waypoints[-1, 1] > 5.0  # it turns left in the ego frame
    values = plan_in_frame(waypoints, frame, window)
    np.testing.assert_allclose(values[:, 0], arcs, atol=0.05)  # s: the distance along the route
    from_offset = 0.6 if frame == "route_offset" else 0.0  # d from the car's offset, or the centreline's
    np.testing.assert_allclose(values[:, 1], offsets + from_offset, atol=0.02)
    np.testing.assert_allclose(plan_to_ego(values, frame, window), waypoints, atol=0.02)


def test_a_plan_along_the_route_needs_the_route_and_a_known_frame():
    with pytest.raises(InputError, match="needs the route"):
        plan_to_ego(np.zeros((8, 2)), "route", None)
    with pytest.raises(InputError, match="plan frame"):
        plan_in_frame(np.zeros((8, 2)), "compass", STRAIGHT_ROAD_ROUTE_EGO)
