"""nav_msgs/Odometry and sensor_msgs/Imu -> ego velocity and acceleration in the model's frame.

The model takes velocity and acceleration in the ego frame (x forward, y left; REP-103 body frame), as the
reference's NAVSIM export does. REP-105 puts Odometry's twist in ``child_frame_id`` (the body frame), but
some publishers put it in the parent (world) frame; ``twist_in_parent_frame`` rotates it by the pose's yaw.
Acceleration comes from an IMU when one is fresh, else from differentiating the velocity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu

from wamdiff2_ros.errors import InputError


@dataclass(frozen=True)
class EgoPosition:
    """The ego's planar position in ``frame_id`` (odometry's pose) and its heading there (None: the pose's
    orientation is not a finite rotation; only a model that plans along the route needs it)."""

    frame_id: str
    xy_m: tuple[float, float]
    yaw_rad: float | None = None


@dataclass(frozen=True)
class EgoMotion:
    """Ego velocity and acceleration in the ego frame at ``stamp_ns``, and where the ego was then (None: the
    odometry's pose was not finite; only a route model needs it)."""

    stamp_ns: int
    velocity_mps: tuple[float, float]
    acceleration_mps2: tuple[float, float]
    position: EgoPosition | None = None


def stamp_ns(header) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def yaw_rad(quaternion) -> float:
    """Rotation about z of a (unit) quaternion, radians."""
    x, y, z, w = quaternion.x, quaternion.y, quaternion.z, quaternion.w
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def _finite(values: tuple[float, ...], what: str) -> tuple[float, ...]:
    if not all(math.isfinite(v) for v in values):
        raise InputError(f"{what} is not finite: {values}")
    return values


def ego_velocity_mps(odometry: Odometry, twist_in_parent_frame: bool = False) -> tuple[float, float]:
    """Planar velocity (vx forward, vy left) of the ego, m/s.

    Raises:
        InputError: NaN or infinite twist (or orientation, when it is used).
    """
    linear = odometry.twist.twist.linear
    vx, vy = _finite((linear.x, linear.y), "odometry twist")
    if not twist_in_parent_frame:
        return vx, vy
    orientation = odometry.pose.pose.orientation
    _finite((orientation.x, orientation.y, orientation.z, orientation.w), "odometry orientation")
    yaw = yaw_rad(orientation)
    cos_yaw, sin_yaw = math.cos(yaw), math.sin(yaw)
    return cos_yaw * vx + sin_yaw * vy, -sin_yaw * vx + cos_yaw * vy


def imu_acceleration_mps2(imu: Imu) -> tuple[float, float]:
    """Planar linear acceleration from an IMU mounted along the ego axes (gravity lies on z), m/s^2.

    Raises:
        InputError: NaN or infinite acceleration.
    """
    acceleration = imu.linear_acceleration
    return _finite((acceleration.x, acceleration.y), "IMU linear acceleration")


class AccelerationFromVelocity:
    """Acceleration as the smoothed derivative of successive velocities (when no IMU is available).

    Args:
        smoothing: weight of the newest finite difference in an exponential average, in (0, 1].
        max_gap_s: a longer gap between samples (or a stamp going backwards) restarts the estimate.
    """

    def __init__(self, smoothing: float = 0.3, max_gap_s: float = 0.5) -> None:
        self.smoothing, self.max_gap_ns = smoothing, int(max_gap_s * 1e9)
        self._last: tuple[int, tuple[float, float]] | None = None
        self._estimate = (0.0, 0.0)

    def update(self, stamp: int, velocity_mps: tuple[float, float]) -> tuple[float, float]:
        last, self._last = self._last, (stamp, velocity_mps)
        if last is None or not 0 < stamp - last[0] <= self.max_gap_ns:
            self._estimate = (0.0, 0.0)
            return self._estimate
        dt_s = (stamp - last[0]) / 1e9
        difference = tuple((v - u) / dt_s for v, u in zip(velocity_mps, last[1], strict=True))
        self._estimate = tuple(
            (1 - self.smoothing) * e + self.smoothing * d
            for e, d in zip(self._estimate, difference, strict=True)
        )
        return self._estimate


def ego_position(odometry: Odometry) -> EgoPosition | None:
    """The pose's planar position and heading in the odometry's frame; None where the position is not
    finite (the heading None where the orientation is not finite or not a rotation: all zeros)."""
    position, orientation = odometry.pose.pose.position, odometry.pose.pose.orientation
    if not (math.isfinite(position.x) and math.isfinite(position.y)):
        return None
    quaternion = (orientation.x, orientation.y, orientation.z, orientation.w)
    rotation = all(math.isfinite(q) for q in quaternion) and any(q != 0.0 for q in quaternion)
    yaw = yaw_rad(orientation) if rotation else None
    return EgoPosition(odometry.header.frame_id, (float(position.x), float(position.y)), yaw)
