import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.route_frame import LATERALS, RouteFrame


def _circle(radius_m: float, spacing_m: float = 2.0) -> np.ndarray:
    # A left-hand quarter circle from (0, 0) heading +x, centre (0, radius), a simulator route's spacing.
    angles = np.arange(0.0, np.pi / 2, spacing_m / radius_m)
    return np.stack([radius_m * np.sin(angles), radius_m * (1 - np.cos(angles))], 1)


@pytest.mark.parametrize("lateral", LATERALS)
def test_on_a_straight_route_d_is_the_offset_from_the_centreline_or_from_the_car(lateral):
    frame = RouteFrame.from_points([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0]])
    origin = np.array([3.0, 1.5])
    s, d = np.array([0.0, 5.0, 40.0]), np.array([0.0, -1.0, 2.0])
    points = frame.to_xy(s, d, origin, lateral)
    y = d + (0.0 if lateral == "centreline" else 1.5)
    np.testing.assert_allclose(points, np.stack([3.0 + s, y], 1))  # on straight past the end
    s_back, d_back = frame.from_xy(points, origin, lateral)
    np.testing.assert_allclose(s_back, s, atol=1e-12)
    np.testing.assert_allclose(d_back, d, atol=1e-12)


@pytest.mark.parametrize("lateral", LATERALS)
def test_coordinates_round_trip_on_a_curve_and_zero_offset_stays_on_the_route(lateral):
    route = _circle(30.0)
    frame = RouteFrame.from_points(route)
    origin = route[3] + np.array([0.4, -0.8])  # off the centreline
    s = np.linspace(0.0, 40.0, 9)
    d = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 0.3, 0.0])
    points = frame.to_xy(s, d, origin, lateral)
    # Positions to coordinates and back (how answers are written, then read) is exact inside a bend and
    # within centimetres outside it (the rounded corners); coordinates to positions and back within
    # centimetres (inside a bend a position can be nearer the next segment).
    s_back, d_back = frame.from_xy(points, origin, lateral)
    np.testing.assert_allclose(frame.to_xy(s_back, d_back, origin, lateral), points, atol=0.02)
    np.testing.assert_allclose(s_back, s, atol=0.05)
    np.testing.assert_allclose(d_back, d, atol=0.01)
    # d = 0: the route's own points (moved by the origin's offset from its projection), or the origin's offset
    start, origin_offset = frame.project(origin)
    shift = origin - frame.position(start) if lateral == "moved" else 0.0
    on_route = frame.to_xy(s, np.zeros_like(s), origin, lateral) - shift
    _, offsets = frame.project(on_route)
    np.testing.assert_allclose(offsets, origin_offset if lateral == "offset" else 0.0, atol=1e-6)


def test_a_turn_bends_a_straight_plan_and_a_standing_plan_stays_put_in_the_moved_frame():
    right_turn = np.vstack([[[x, 0.0] for x in range(0, 22, 2)], [[20.0, -y] for y in range(2, 40, 2)]])
    frame = RouteFrame.from_points(right_turn)
    origin = np.array([2.0, 0.0])
    bent = frame.to_xy(np.array([10.0, 25.0]), np.zeros(2), origin)
    np.testing.assert_allclose(bent[0], [12.0, 0.0])
    np.testing.assert_allclose(bent[1], [20.0, -7.4], atol=0.05)  # the corner rounded: 0.4 m shorter
    beside = np.array([2.0, 0.5])
    standing = frame.to_xy(np.zeros(3), np.zeros(3), beside, "moved")
    np.testing.assert_allclose(standing, np.tile(beside, (3, 1)))
    np.testing.assert_allclose(frame.to_xy(np.zeros(1), np.zeros(1), beside), [[2.0, 0.0]])


def test_project_gives_the_signed_offset_to_the_left():
    frame = RouteFrame.from_points([[0.0, 0.0], [0.0, 10.0]])  # heading +y: left is -x
    arc, offset = frame.project(np.array([[1.0, 4.0], [-2.0, 7.0], [0.0, -3.0]]))
    np.testing.assert_allclose(arc, [4.0, 7.0, -3.0])  # before the first point: straight on back
    np.testing.assert_allclose(offset, [-1.0, 2.0, 0.0])


@pytest.mark.parametrize(
    "points", [[[1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]
)
def test_a_route_needs_two_distinct_planar_points(points):
    with pytest.raises(InputError):
        RouteFrame.from_points(points)


def test_the_offset_frame_keeps_the_cars_offset_normal_to_the_route_through_a_turn():
    route = _circle(30.0)
    frame = RouteFrame.from_points(route)
    origin = route[2] + 1.2 * np.array([-np.sin(4 / 30), np.cos(4 / 30)])  # 1.2 m inside the bend
    s = np.linspace(0.0, 40.0, 9)
    points = frame.to_xy(s, np.zeros_like(s), origin, "offset")
    # the car's offset from the (rounded) route kept: a circle of radius 28.8 round the bend's centre
    np.testing.assert_allclose(np.linalg.norm(points - [0.0, 30.0], axis=1), 28.8, atol=0.03)
    np.testing.assert_allclose(frame.to_xy(np.zeros(1), np.zeros(1), origin, "offset"), [origin], atol=1e-9)


def test_an_unknown_lateral_frame_is_refused():
    frame = RouteFrame.from_points([[0.0, 0.0], [10.0, 0.0]])
    with pytest.raises(InputError):
        frame.to_xy(np.zeros(1), np.zeros(1), np.zeros(2), "sideways")


def test_a_car_behind_the_routes_start_counts_s_from_where_it_is():
    frame = RouteFrame.from_points([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0]])
    behind = np.array([-5.0, 0.0])
    plan = np.stack([np.arange(1.0, 9.0) - 5.0, np.zeros(8)], 1)
    s, d = frame.from_xy(plan, behind)
    np.testing.assert_allclose(s, np.arange(1.0, 9.0))
    np.testing.assert_allclose(frame.to_xy(s, d, behind), plan, atol=1e-12)


def test_a_sparse_route_keeps_its_corner_and_a_route_that_doubles_back_has_directions():
    sparse = RouteFrame.from_points([[0.0, 0.0], [30.0, 0.0], [30.0, -30.0]])  # a navigation stack's points
    _, offset = sparse.project(np.array([30.0, 0.0]))
    assert abs(offset) < 0.5  # a right angle rounded by decimetres (5.3 m without the cuts), not metres
    there_and_back = RouteFrame.from_points([[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]])
    assert np.isfinite(there_and_back.to_xy(np.array([1.0]), np.zeros(1), np.zeros(2))).all()
