"""Online candidate scoring: boxes placed on the ground, corridor bounds, collisions decide the pick."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.scoring import ScoredCandidates, ScorerSettings, agents_from_boxes, score_candidates
from wamdiff2_ros.geometry import Camera

CAMERA = Camera()  # NAVSIM-like 1920x1080 front camera
STRAIGHT_10MPS = np.stack([5.0 * np.arange(1, 9), np.zeros(8)], axis=1)
STOP_AT_6M = np.stack([np.minimum(2.0 * np.arange(1, 9), 6.0), np.zeros(8)], axis=1)


def box_around_ground_point(x_m: float, y_m: float, half_width_px: float = 40.0) -> np.ndarray:
    u, v = CAMERA.project_ego(np.array([[x_m, y_m, 0.0]]))[0]
    return np.array([u - half_width_px, v - 60.0, u + half_width_px, v])


def test_box_bottom_edge_lands_where_the_vehicle_rear_is() -> None:
    agents = agents_from_boxes(box_around_ground_point(20.0, 1.0)[None], CAMERA, ScorerSettings())
    assert agents.poses_ego.shape == (1, 8, 3)
    np.testing.assert_allclose(agents.poses_ego[0, :, :2], np.tile([20.0 + 2.25, 1.0], (8, 1)), atol=1e-6)


def test_box_above_the_horizon_is_left_out() -> None:
    sky = np.array([[900.0, 10.0, 1000.0, 40.0]])
    assert len(agents_from_boxes(sky, CAMERA, ScorerSettings()).poses_ego) == 0


def test_candidate_that_hits_a_detected_car_loses_to_one_that_stops() -> None:
    agents = agents_from_boxes(box_around_ground_point(12.0, 0.0)[None], CAMERA, ScorerSettings())
    scored = score_candidates([STRAIGHT_10MPS, STOP_AT_6M], (10.0, 0.0), agents)
    assert scored.scores[0]["no_collision"] == 0.0 and scored.scores[0]["pdm_score"] == 0.0
    assert scored.scores[1]["no_collision"] == 1.0 and scored.selected == 1 and not scored.stopped


PDM = ScorerSettings(selection="pdm")
EMPTY = agents_from_boxes(np.zeros((0, 4)), CAMERA, ScorerSettings())


def test_leaving_the_corridor_is_penalised() -> None:
    swerve = np.stack([5.0 * np.arange(1, 9), -1.5 * np.arange(1, 9)], axis=1)
    scored = score_candidates([swerve, STRAIGHT_10MPS], (10.0, 0.0), EMPTY, PDM)
    assert scored.scores[0]["drivable_area"] == 0.0 and scored.selected == 1


def test_by_pdm_score_progress_decides_and_ties_keep_the_first() -> None:
    scored = score_candidates([STOP_AT_6M, STRAIGHT_10MPS, STRAIGHT_10MPS], (10.0, 0.0), EMPTY, PDM)
    assert scored.selected == 1 and scored.scores[1]["ego_progress"] == pytest.approx(1.0)
    assert score_candidates([], (0.0, 0.0), EMPTY) == ScoredCandidates([], [], -1)


def test_first_safe_keeps_the_planners_plan_unless_it_hits_a_detected_car() -> None:
    swerve = np.stack([5.0 * np.arange(1, 9), -1.5 * np.arange(1, 9)], axis=1)  # leaves the straight corridor
    assert score_candidates([swerve, STRAIGHT_10MPS], (10.0, 0.0), EMPTY).selected == 0
    assert score_candidates([STOP_AT_6M, STRAIGHT_10MPS], (10.0, 0.0), EMPTY).selected == 0
    car_ahead = agents_from_boxes(box_around_ground_point(12.0, 0.0)[None], CAMERA, ScorerSettings())
    scored = score_candidates([STRAIGHT_10MPS, STRAIGHT_10MPS, STOP_AT_6M], (10.0, 0.0), car_ahead)
    assert [s["no_collision"] for s in scored.scores] == [0.0, 0.0, 1.0] and scored.selected == 2


def test_every_candidate_colliding_drives_the_scorers_stop_along_the_first_path() -> None:
    car_ahead = agents_from_boxes(box_around_ground_point(20.0, 0.0)[None], CAMERA, ScorerSettings())
    slower = np.stack([4.0 * np.arange(1, 9), np.zeros(8)], axis=1)
    scored = score_candidates([slower, STRAIGHT_10MPS], (10.0, 0.0), car_ahead)
    assert scored.stopped and scored.selected == 2 and len(scored.trajectories) == len(scored.scores) == 3
    assert [s["no_collision"] for s in scored.scores] == [0.0, 0.0, 1.0]
    stop = scored.trajectories[2]
    assert np.all(stop[:, 1] == 0.0) and np.all(np.diff(stop[:, 0]) >= 0.0)
    # It stands 2 m short of where its 5 m box meets the car's rear (20 m): centre at 20 - 2.5 - 2, braking
    # at 10^2 / (2 * 15.5) m/s^2 from the start, so that it stops within the 4 s horizon.
    assert stop[-1, 0] == pytest.approx(15.5, abs=0.3) and stop[-2, 0] == pytest.approx(15.5, abs=0.3)
    assert stop[0, 0] == pytest.approx(5.0 - 100.0 / 31.0 / 8.0, abs=0.1)


def test_without_the_stop_every_candidate_colliding_drives_the_best_score() -> None:
    car_ahead = agents_from_boxes(box_around_ground_point(12.0, 0.0)[None], CAMERA, ScorerSettings())
    slower = np.stack([4.0 * np.arange(1, 9), np.zeros(8)], axis=1)
    scored = score_candidates(
        [slower, STRAIGHT_10MPS], (10.0, 0.0), car_ahead, ScorerSettings(stop_when_blocked=False)
    )
    assert all(s["no_collision"] == 0.0 for s in scored.scores) and not scored.stopped
    assert scored.selected == int(np.argmax([s["pdm_score"] for s in scored.scores]))


def test_an_unknown_selection_rule_is_refused() -> None:
    with pytest.raises(InputError, match="selection"):
        ScorerSettings(selection="best")
