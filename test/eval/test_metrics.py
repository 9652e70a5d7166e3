"""Planning metrics against hand-computed cases."""

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval import metrics
from wamdiff2_ros.eval.metrics import Agents, DrivableArea, ScoringContext

T_S = np.arange(1, 9) * 0.5
STRAIGHT_10MPS = np.stack([10.0 * T_S, np.zeros(8)], axis=1)


def _agent_at(x_m: float, y_m: float = 0.0, yaw_rad: float = 0.0) -> Agents:
    return Agents(np.tile([x_m, y_m, yaw_rad], (1, 8, 1)), np.array([[5.0, 2.0]]))


def test_l2_ade_fde_of_a_constant_offset():
    truth = np.stack([STRAIGHT_10MPS, STRAIGHT_10MPS])
    pred = truth + np.array([3.0, 4.0])
    pred[1, -1] += [0.0, 5.0]  # last waypoint of the second sample: offset (3, 9)
    errors = metrics.displacement_errors(pred, truth)
    expected_last = (5.0 + np.hypot(3.0, 9.0)) / 2
    np.testing.assert_allclose(errors["l2_per_waypoint_m"], [5.0] * 7 + [expected_last])
    assert errors["fde_m"] == pytest.approx(expected_last)
    assert errors["ade_m"] == pytest.approx((5.0 * 15 + np.hypot(3.0, 9.0)) / 16)


def test_l2_refuses_wrong_shapes():
    with pytest.raises(InputError, match=r"\(\.\.\., 8, 2\)"):
        metrics.l2_per_waypoint(np.zeros((7, 2)), np.zeros((7, 2)))
    with pytest.raises(InputError, match="differ in shape"):
        metrics.l2_per_waypoint(np.zeros((2, 8, 2)), np.zeros((8, 2)))


def test_headings_follow_the_path_and_hold_when_standing_or_reversing():
    waypoints = np.array([[1, 0], [2, 0], [2, 1], [2, 1], [2, 0.3], [2, 0.3], [2, 2], [2, 2.1]], dtype=float)
    #                      forward   forward  left   stand   reverse   stand    forward  creep
    np.testing.assert_allclose(metrics.headings_from_waypoints(waypoints), [0, 0] + [np.pi / 2] * 6)
    assert metrics.headings_from_waypoints(np.zeros((8, 2)), initial_heading_rad=0.3)[-1] == 0.3


@pytest.mark.parametrize(
    ("centre_b", "yaw_b", "overlap"),
    [
        ((4.9, 0.0), 0.0, True),
        ((5.0, 0.0), 0.0, True),
        ((5.1, 0.0), 0.0, False),
        ((0.0, 2.1), 0.0, False),
        ((4.8, 3.3), np.pi / 4, False),
        ((3.0, 1.5), np.pi / 4, True),
    ],
    ids=["overlap", "touch", "gap", "side-gap", "rotated-gap", "rotated-hit"],
)
def test_box_overlap_separating_axes(centre_b, yaw_b, overlap):
    a = metrics.footprints(np.array([[[0.0, 0.0, 0.0]]]), np.array([[5.0, 2.0]]))
    b = metrics.footprints(np.array([[[*centre_b, yaw_b]]]), np.array([[5.0, 2.0]]))
    assert bool(metrics.boxes_overlap(a, b)[0, 0]) is overlap


def test_collision_against_true_futures_ignores_unknown_poses():
    assert metrics.collides(STRAIGHT_10MPS, _agent_at(20.0))
    assert not metrics.collides(STRAIGHT_10MPS, _agent_at(20.0, y_m=3.0))
    gone = _agent_at(20.0)
    gone.poses_ego[:] = np.nan
    assert not metrics.collides(STRAIGHT_10MPS, gone)


def test_no_collision_score_blames_only_the_ego():
    assert metrics.no_at_fault_collision(STRAIGHT_10MPS, _agent_at(20.0)) == 0.0  # drives into a stopped car
    standing = np.zeros((8, 2))
    assert metrics.no_at_fault_collision(standing, _agent_at(2.0)) == 1.0  # hit while standing still
    from_behind = Agents(
        np.stack([STRAIGHT_10MPS[:, 0] - 4.0, np.zeros(8), np.zeros(8)], axis=1)[None], np.array([[5.0, 2.0]])
    )
    assert metrics.no_at_fault_collision(STRAIGHT_10MPS, from_behind) == 1.0  # rear-ended


def test_drivable_area_compliance_checks_every_corner():
    lane = DrivableArea((np.array([[-10.0, -2.0], [100.0, -2.0], [100.0, 2.0], [-10.0, 2.0]]),))
    assert metrics.drivable_area_compliance(STRAIGHT_10MPS, lane) == 1.0
    drifting = STRAIGHT_10MPS + np.stack(
        [np.zeros(8), np.linspace(0, 1.5, 8)], axis=1
    )  # y 1.5 + 1 m half width
    assert metrics.drivable_area_compliance(drifting, lane) == 0.0
    assert metrics.drivable_area_compliance(drifting, None) == 1.0


def test_drivable_area_is_a_union_of_polygons():
    area = DrivableArea(
        (np.array([[0, 0], [1, 0], [1, 1], [0, 1]]), np.array([[2, 0], [3, 0], [3, 1], [2, 1]]))
    )
    np.testing.assert_array_equal(
        area.contains(np.array([[0.5, 0.5], [1.5, 0.5], [2.5, 0.5]])), [True, False, True]
    )


def test_time_to_collision_flags_closing_in_on_a_stopped_car():
    assert metrics.time_to_collision_ok(STRAIGHT_10MPS, _agent_at(19.5)) == 0.0  # 4.5 m gap at 10 m/s
    assert metrics.time_to_collision_ok(STRAIGHT_10MPS, _agent_at(60.0)) == 1.0  # 15 m gap at the end
    assert metrics.time_to_collision_ok(STRAIGHT_10MPS, _agent_at(-30.0)) == 1.0  # behind
    assert metrics.time_to_collision_ok(STRAIGHT_10MPS, Agents.none()) == 1.0


@pytest.mark.parametrize(("scale", "expected"), [(1.0, 1.0), (0.5, 0.5), (1.5, 1.0), (0.0, 0.0)])
def test_ego_progress_is_relative_to_the_reference(scale, expected):
    assert metrics.ego_progress(STRAIGHT_10MPS * scale, STRAIGHT_10MPS) == pytest.approx(expected)


def test_ego_progress_is_full_when_the_reference_barely_moves():
    assert metrics.ego_progress(np.zeros((8, 2)), STRAIGHT_10MPS * 0.1) == 1.0


def test_comfort_terms_of_constant_acceleration():
    t_s = T_S
    accelerating = np.stack([10.0 * t_s + t_s**2, np.zeros(8)], axis=1)  # a = 2 m/s^2 from 10 m/s
    terms = metrics.comfort_terms(accelerating, np.array([10.0, 0.0]))
    assert terms["lon_accel_min_mps2"] == pytest.approx(2.0) and terms["lon_accel_max_mps2"] == pytest.approx(
        2.0
    )
    assert terms["jerk_max_mps3"] == pytest.approx(0.0, abs=1e-9) and terms["yaw_rate_max_radps"] == 0.0
    assert metrics.comfort(accelerating, np.array([10.0, 0.0])) == 1.0
    assert metrics.comfort(np.zeros((8, 2)), np.array([20.0, 0.0])) == 0.0  # 20 m/s to standstill at once


def test_pdm_score_composition():
    context = ScoringContext(_agent_at(19.5, y_m=2.5), STRAIGHT_10MPS, np.array([10.0, 0.0]))
    scores = metrics.pdm_subscores(STRAIGHT_10MPS, context)
    assert scores["no_collision"] == 1.0 and scores["ego_progress"] == 1.0 and scores["comfort"] == 1.0
    assert scores["time_to_collision"] == 1.0 and scores["pdm_score"] == 1.0
    half_progress = metrics.pdm_subscores(STRAIGHT_10MPS * 0.5, context)
    assert half_progress["comfort"] == 0.0  # braking from 10 m/s to 5 m/s in 0.25 s
    assert half_progress["pdm_score"] == pytest.approx((5 * 1 + 2 * 0 + 5 * 0.5) / 12)
    crash = metrics.pdm_subscores(
        STRAIGHT_10MPS, ScoringContext(_agent_at(20.0), STRAIGHT_10MPS, np.array([10.0, 0.0]))
    )
    assert crash["no_collision"] == 0.0 and crash["pdm_score"] == 0.0


def test_pdm_refuses_non_finite_waypoints():
    bad = STRAIGHT_10MPS.copy()
    bad[3, 0] = np.nan
    with pytest.raises(InputError, match="finite"):
        metrics.pdm_subscores(bad, ScoringContext(Agents.none(), STRAIGHT_10MPS, np.zeros(2)))


def test_driving_score_multiplies_penalties():
    assert metrics.driving_score(0.8, {"collision_vehicle": 1}) == pytest.approx(0.48)
    assert metrics.driving_score(1.0, {"collision_vehicle": 2, "off_road": 1}) == pytest.approx(0.6**2 * 0.65)
    assert metrics.driving_score(0.5, {}) == 0.5
    with pytest.raises(InputError, match="no penalty"):
        metrics.driving_score(1.0, {"red_light": 1})


def test_speed_jump_flags_a_misplaced_digit_not_a_smooth_stop():
    cruise = np.stack([np.arange(1, 9) * 5.0, np.zeros(8)], axis=1)  # 10 m/s
    stopping = np.stack([np.cumsum([4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0]), np.zeros(8)], axis=1)
    misplaced = cruise.copy()
    misplaced[4, 0] = 2.5  # "2.50" where the scene needs "25.00"
    assert not metrics.speed_jump(cruise) and not metrics.speed_jump(stopping)
    assert metrics.speed_jump(misplaced)
