"""The expert's comfort limits and the traffic's no-reversing rule, on highway-env's own vehicles."""

import numpy as np
import pytest

from wamdiff2_ros.sim.drivers import CurveSpeedProfile, ExpertDriver
from wamdiff2_ros.sim.expert import record_drive
from wamdiff2_ros.sim.scenes import make_scene


def _straight_then_arc(radius_m: float) -> np.ndarray:
    straight = np.stack([np.arange(-100.0, 0.0, 1.0), np.zeros(100)], axis=1)
    phi = np.arange(0.0, np.pi / 2, 1.0 / radius_m)
    arc = np.stack([radius_m * np.sin(phi), radius_m * (1 - np.cos(phi))], axis=1)
    return np.concatenate([straight, arc])


def test_curve_speed_keeps_lateral_acceleration_and_brakes_ahead():
    profile = CurveSpeedProfile(_straight_then_arc(12.0), lat_accel_max_mps2=3.0, decel_mps2=2.0)
    assert profile.allowed_speed_mps(np.array([8.0, 3.0]), 50.0) == pytest.approx(
        6.0, rel=0.05
    )  # sqrt(3 * 12)
    at_40m = profile.allowed_speed_mps(np.array([-40.0, 0.0]), 60.0)
    assert at_40m == pytest.approx(np.sqrt(36.0 + 2 * 2.0 * 40.0), rel=0.05)  # can still brake to 6 m/s
    assert profile.allowed_speed_mps(np.array([-99.0, 0.0]), 30.0) > 100.0  # nothing to slow for yet


def test_expert_accelerates_gently_and_never_reverses():
    scene = make_scene(23, "highway")  # a lead car brakes hard on a single-lane road
    assert isinstance(scene.ego, ExpertDriver)
    log = record_drive(scene, 12.0)
    speeds = np.array([s.ego.speed_mps for s in log])
    accel = np.diff(speeds) * 10.0
    assert accel.max() <= ExpertDriver.COMFORT_ACC_MAX + 1e-6 and accel.min() >= -ExpertDriver.ACC_MAX - 1e-6
    assert speeds.min() >= 0.0 and not log[-1].ego_crashed
    assert min(s.ego.speed_mps for s in log[50:]) < speeds[0] - 3.0  # it did brake for the lead car
