"""The plan smoother is the least-squares fit it claims to be: constant velocity is its own fit, a hard
brake keeps its strength, a noisy plan loses most of its jerk, and weight 0 changes nothing."""

from __future__ import annotations

import numpy as np

from wamdiff2_ros.decoding.smoothing import STEP_S, smooth_waypoints

TIMES = np.arange(1, 9) * STEP_S


def _jerk(waypoints: np.ndarray, velocity: tuple[float, float]) -> np.ndarray:
    sequence = np.vstack([-np.asarray(velocity) * STEP_S, np.zeros(2), waypoints])
    return np.diff(sequence, n=3, axis=0) / STEP_S**3


def test_the_fit_is_the_least_squares_solution():
    rng = np.random.default_rng(0)
    waypoints, velocity, weight = rng.normal(size=(8, 2)) * 3, (7.0, -0.5), 2.0
    back = np.vstack([-np.asarray(velocity) * STEP_S, np.zeros(2)])
    third = np.diff(np.eye(10), n=3, axis=0)  # over (ego a step back, ego now, 8 waypoints)
    system = np.vstack([np.eye(8), np.sqrt(weight) * third[:, 2:]])
    expected = np.stack(
        [
            np.linalg.lstsq(
                system, np.concatenate([waypoints[:, a], -np.sqrt(weight) * third[:, :2] @ back[:, a]]), None
            )[0]
            for a in range(2)
        ],
        axis=1,
    )
    np.testing.assert_allclose(smooth_waypoints(waypoints, velocity, weight), expected, atol=1e-10)


def test_constant_velocity_is_its_own_fit_and_weight_zero_changes_nothing():
    straight = np.stack([12.0 * TIMES, 0.5 * TIMES], axis=1)
    np.testing.assert_allclose(smooth_waypoints(straight, (12.0, 0.5)), straight, atol=1e-9)
    noisy = straight + np.random.default_rng(1).normal(scale=0.1, size=straight.shape)
    assert np.array_equal(smooth_waypoints(noisy, (12.0, 0.5), 0.0), noisy)


def test_a_hard_brake_keeps_its_strength_and_noise_loses_its_jerk():
    x = np.maximum(15.0 * TIMES - 0.5 * 4.0 * TIMES**2, 0.0)  # 4 m/s^2 to a stop from 15 m/s
    brake = np.stack([x, np.zeros(8)], axis=1)
    assert np.abs(smooth_waypoints(brake, (15.0, 0.0)) - brake).max() < 0.15
    rng = np.random.default_rng(2)
    noisy = np.stack([10.0 * TIMES, np.zeros(8)], axis=1) + rng.normal(scale=0.05, size=(8, 2))
    before = np.abs(_jerk(noisy, (10.0, 0.0))).max()
    after = np.abs(_jerk(smooth_waypoints(noisy, (10.0, 0.0)), (10.0, 0.0))).max()
    assert after < before / 3
