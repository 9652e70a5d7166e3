"""Odometry / IMU -> ego velocity and acceleration in the model's frame."""

from __future__ import annotations

import math

import pytest
from geometry_msgs.msg import Quaternion
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.nodes.convert.odometry import (
    AccelerationFromVelocity,
    ego_velocity_mps,
    imu_acceleration_mps2,
    yaw_rad,
)


def odometry(vx: float, vy: float, yaw: float = 0.0) -> Odometry:
    msg = Odometry()
    msg.twist.twist.linear.x, msg.twist.twist.linear.y = vx, vy
    msg.pose.pose.orientation = Quaternion(z=math.sin(yaw / 2), w=math.cos(yaw / 2))
    return msg


def test_child_frame_twist_is_already_ego_frame() -> None:
    assert ego_velocity_mps(odometry(5.0, -0.5, yaw=1.0)) == (5.0, -0.5)


@pytest.mark.parametrize(
    ("yaw", "world_velocity", "expected"),
    [
        (0.0, (3.0, 0.0), (3.0, 0.0)),
        (math.pi / 2, (0.0, 3.0), (3.0, 0.0)),
        (math.pi / 2, (3.0, 0.0), (0.0, -3.0)),
    ],
    ids=["east-facing", "north-facing-forward", "north-facing-sliding-right"],
)
def test_parent_frame_twist_is_rotated_into_ego_frame(yaw, world_velocity, expected) -> None:
    assert ego_velocity_mps(odometry(*world_velocity, yaw=yaw), twist_in_parent_frame=True) == pytest.approx(
        expected, abs=1e-12
    )


def test_yaw_of_quaternion() -> None:
    assert yaw_rad(Quaternion(z=math.sin(0.35), w=math.cos(0.35))) == pytest.approx(0.7)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_state_is_rejected(bad: float) -> None:
    with pytest.raises(InputError, match="odometry twist is not finite"):
        ego_velocity_mps(odometry(bad, 0.0))
    imu = Imu()
    imu.linear_acceleration.y = bad
    with pytest.raises(InputError, match="IMU linear acceleration is not finite"):
        imu_acceleration_mps2(imu)


def test_acceleration_from_velocity_tracks_constant_acceleration() -> None:
    estimator = AccelerationFromVelocity(smoothing=0.5)
    estimate = (0.0, 0.0)
    for i in range(30):
        estimate = estimator.update(i * 50_000_000, (2.0 * i * 0.05, 0.0))  # 2 m/s^2 forward
    assert estimate == pytest.approx((2.0, 0.0), rel=1e-3)


@pytest.mark.parametrize("next_stamp_ns", [0, -1, 2_000_000_000], ids=["same", "backwards", "gap"])
def test_acceleration_estimate_restarts_on_bad_timing(next_stamp_ns: int) -> None:
    estimator = AccelerationFromVelocity()
    estimator.update(0, (0.0, 0.0))
    estimator.update(100_000_000, (1.0, 0.0))
    assert estimator.update(
        100_000_000 + next_stamp_ns if next_stamp_ns > 0 else next_stamp_ns, (9.0, 0.0)
    ) == (
        0.0,
        0.0,
    )
