"""Fallback plans: a stop trajectory brakes and stays put; a held plan is advanced along itself in time."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_ros.nodes.fallback import STOP_DECELERATION_MPS2, advance_plan, stop_trajectory


def test_stop_trajectory_brakes_to_a_standstill() -> None:
    stop = stop_trajectory(6.0)
    stopping_distance_m = 6.0**2 / (2 * STOP_DECELERATION_MPS2)
    assert stop.shape == (8, 2) and np.all(stop[:, 1] == 0)
    assert np.all(np.diff(stop[:, 0]) >= 0) and stop[-1, 0] == pytest.approx(stopping_distance_m)
    assert stop[0, 0] == pytest.approx(6.0 * 0.5 - 0.5 * STOP_DECELERATION_MPS2 * 0.25)


@pytest.mark.parametrize("speed", [0.0, -3.0, float("nan")])
def test_stop_trajectory_from_standstill_or_bad_speed_stays_at_origin(speed: float) -> None:
    np.testing.assert_array_equal(stop_trajectory(speed), np.zeros((8, 2)))


def test_advancing_a_constant_speed_plan_gives_the_same_plan() -> None:
    plan = np.stack([5.0 * 0.5 * np.arange(1, 9), np.zeros(8)], axis=1)
    np.testing.assert_allclose(advance_plan(plan, 0.7), plan, atol=1e-12)


def test_advancing_by_zero_is_identity_and_by_one_step_shifts() -> None:
    plan = np.array(
        [[1.0, 0.0], [3.0, 1.0], [6.0, 3.0], [10.0, 6.0], [15.0, 9.0], [21, 12], [28, 15], [36, 18]]
    )
    np.testing.assert_allclose(advance_plan(plan, 0.0), plan)
    shifted = advance_plan(plan, 0.5)
    np.testing.assert_allclose(shifted[:7], plan[1:] - plan[0])
    np.testing.assert_allclose(shifted[7], plan[7] - plan[0] + (plan[7] - plan[6]))  # last velocity held
