"""The scorer's stop: the planner's path kept, braked to stand short of the first vehicle on it."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.eval.metrics import EGO_LENGTH_M, EGO_WIDTH_M, Agents, boxes_overlap, footprints
from wamdiff2_ros.eval.stopping import PATH_STEP_M, first_contact_m, stopping_trajectory
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS

STRAIGHT_10MPS = np.stack([5.0 * np.arange(1, 9), np.zeros(8)], axis=1)


def parked(*centres_xy: tuple[float, float], yaw_rad: float = 0.0) -> Agents:
    poses = np.zeros((len(centres_xy), NUM_WAYPOINTS, 3))
    poses[:, :, :2] = np.asarray(centres_xy, dtype=np.float64)[:, None]
    poses[:, :, 2] = yaw_rad
    return Agents(poses, np.tile([4.5, 1.9], (len(centres_xy), 1)))


def test_no_vehicle_on_the_path_needs_no_stop() -> None:
    assert stopping_trajectory(STRAIGHT_10MPS, 10.0, Agents.none()) is None
    assert stopping_trajectory(STRAIGHT_10MPS, 10.0, parked((20.0, 6.0))) is None  # in the next lane


def test_the_stop_brakes_evenly_to_the_margin_and_holds() -> None:
    stop = stopping_trajectory(STRAIGHT_10MPS, 10.0, parked((22.25, 0.0)), margin_m=2.0)  # rear at 20 m
    room_m = 20.0 - 2.5 - 2.0
    decel = 100.0 / (2.0 * room_m)
    times = 0.5 * np.arange(1, 9)
    expected = np.where(times < 10.0 / decel, 10.0 * times - decel * times**2 / 2.0, room_m)
    np.testing.assert_allclose(stop[:, 0], expected, atol=0.26)  # contact found on a 0.25 m grid
    assert np.all(stop[:, 1] == 0.0)


def test_the_stop_follows_a_curving_path() -> None:
    angles = np.linspace(0.1, 0.8, 8)
    arc = np.stack([30.0 * np.sin(angles), 30.0 * (1 - np.cos(angles))], axis=1)  # a left curve, radius 30
    car_on_curve = parked(tuple(30.0 * np.array([np.sin(0.6), 1 - np.cos(0.6)])), yaw_rad=0.6)
    stop = stopping_trajectory(arc, 8.0, car_on_curve)
    radii = np.linalg.norm(stop - np.array([0.0, 30.0]), axis=1)
    np.testing.assert_allclose(radii, 30.0, atol=0.2)  # on the circle, between its waypoints
    assert np.all(np.diff(np.arctan2(stop[:, 0], 30.0 - stop[:, 1])) >= -1e-9)  # never backwards
    assert np.arctan2(stop[-1, 0], 30.0 - stop[-1, 1]) < 0.6 - 4.0 / 30.0  # short of the car


def test_a_vehicle_closer_than_the_margin_gets_the_hardest_brake() -> None:
    stop = stopping_trajectory(STRAIGHT_10MPS, 10.0, parked((6.0, 0.0)), max_decel_mps2=6.0)
    assert stop[0, 0] == pytest.approx(10.0 * 0.5 - 3.0 * 0.25)
    assert stop[-1, 0] == pytest.approx(100.0 / 12.0)


def test_standing_still_stays_put_and_a_standing_plan_looks_straight_ahead() -> None:
    assert np.array_equal(stopping_trajectory(STRAIGHT_10MPS, 0.0, parked((8.0, 0.0))), np.zeros((8, 2)))
    standing = np.zeros((8, 2))
    rolling = stopping_trajectory(standing, 5.0, parked((12.0, 0.0)))
    assert rolling[-1, 0] == pytest.approx(12.0 - 2.25 - 2.5 - 2.0, abs=0.26)


def test_the_contact_search_finds_what_testing_every_pose_against_every_vehicle_finds() -> None:
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(40):
        count = int(rng.integers(1, 8))
        poses = np.zeros((count, NUM_WAYPOINTS, 3))
        poses[:, :, 0] = rng.uniform(0.0, 60.0, count)[:, None]
        poses[:, :, 1] = rng.uniform(-8.0, 8.0, count)[:, None]
        poses[:, :, 2] = rng.uniform(-np.pi, np.pi, count)[:, None]
        agents = Agents(poses, np.stack([rng.uniform(3.0, 12.0, count), rng.uniform(1.5, 2.6, count)], 1))
        arc_m = np.arange(0.0, 70.0, 1.0)
        path = np.stack([arc_m, 0.002 * arc_m**2], axis=1)  # a gentle left curve
        arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(path, axis=0), axis=1))])
        s_m = np.arange(0.0, arc_m[-1], PATH_STEP_M)
        points = np.stack([np.interp(s_m, arc_m, path[:, 0]), np.interp(s_m, arc_m, path[:, 1])], 1)
        ahead = np.stack(
            [
                np.interp(s_m + PATH_STEP_M, arc_m, path[:, 0]),
                np.interp(s_m + PATH_STEP_M, arc_m, path[:, 1]),
            ],
            1,
        )
        headings = np.arctan2(*(ahead - points)[:, ::-1].T)
        ego = footprints(
            np.concatenate([points, headings[:, None]], 1)[None], np.array([[EGO_LENGTH_M, EGO_WIDTH_M]])
        )
        everyone = footprints(poses[:, :1], agents.sizes_m)[:, 0]
        touching = boxes_overlap(ego[0][:, None], everyone[None]).any(axis=1)
        expected = float(s_m[np.argmax(touching)]) if touching.any() else None
        assert first_contact_m(path, arc_m, agents) == expected
        found += expected is not None
    assert 0 < found < 40  # both outcomes are exercised
