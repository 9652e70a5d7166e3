"""Driver models on top of highway-env's IDM/MOBIL: the comfortable expert and the junction traffic class.

Importing this module imports highway-env (through ``engine``'s guard); ``scenes`` imports it lazily. The
expert is the IDM/MOBIL driver with NAVSIM-comfortable limits: gentler accelerations, a jerk limit outside
emergencies, and speeds that keep lateral acceleration low through curves and turns it can see along its
route.
"""

from __future__ import annotations

import numpy as np

from wamdiff2_ros.sim.engine import SIM_HZ, import_highway_env

import_highway_env()
from highway_env.vehicle.behavior import IDMVehicle  # noqa: E402


class CurveSpeedProfile:
    """Highest speed (m/s) at each point of a route polyline so that lateral acceleration stays bounded, and
    the speed allowed now so that braking to it at ``decel_mps2`` is possible in time."""

    def __init__(self, route_map: np.ndarray, lat_accel_max_mps2: float = 3.0, decel_mps2: float = 2.0):
        self.route_map = np.asarray(route_map, dtype=np.float64)
        steps = np.diff(self.route_map, axis=0)
        step_m = np.linalg.norm(steps, axis=1)
        self.arc_m = np.concatenate([[0.0], np.cumsum(step_m)])
        heading = np.unwrap(np.arctan2(steps[:, 1], steps[:, 0]))
        curvature = np.abs(np.diff(heading)) / np.maximum((step_m[1:] + step_m[:-1]) / 2, 1e-6)
        curvature = np.concatenate([[0.0], curvature, [0.0]])  # (N,) per point; ends counted straight
        self.curve_speed_mps = np.sqrt(lat_accel_max_mps2 / np.maximum(curvature, 1e-6))
        self.decel_mps2 = decel_mps2

    def allowed_speed_mps(self, position_map: np.ndarray, preview_m: float) -> float:
        """The speed allowed at ``position_map`` given the curves within ``preview_m`` ahead."""
        nearest = int(np.argmin(np.linalg.norm(self.route_map - position_map, axis=1)))
        ahead = (self.arc_m >= self.arc_m[nearest]) & (self.arc_m <= self.arc_m[nearest] + preview_m)
        distance_m = self.arc_m[ahead] - self.arc_m[nearest]
        return float(np.min(np.sqrt(self.curve_speed_mps[ahead] ** 2 + 2.0 * self.decel_mps2 * distance_m)))


class Traffic(IDMVehicle):
    """highway-env's IDM/MOBIL driver that stops instead of reversing (its IDM can command v < 0)."""

    def act(self, action: dict | str | None = None) -> None:
        super().act(action)
        stop_mps2 = -self.speed * SIM_HZ  # the acceleration that reaches v = 0 at the end of the tick
        self.action["acceleration"] = max(self.action["acceleration"], stop_mps2)


class JunctionTraffic(Traffic):
    """Traffic at four-way junctions. highway-env's intersection sets IDM constants on its vehicle class;
    giving it this subclass keeps those changes away from every other scene in the process."""


class RoundaboutTraffic(Traffic):
    """Traffic at roundabouts (its own class, so no other environment's class-wide settings reach it)."""


class ExpertDriver(Traffic):
    """IDM/MOBIL with comfortable limits; ``speed_profile`` slows it for curves ahead on its route."""

    COMFORT_ACC_MAX = 2.0  # IDM's maximum acceleration, under NAVSIM's 2.40 m/s^2
    COMFORT_ACC_MIN = -3.0  # IDM's comfortable deceleration
    ACC_MAX = 4.0  # hard limit, inside NAVSIM's -4.05 m/s^2
    JERK_MAX_MPS3 = 3.0  # margin under NAVSIM's 4.13 m/s^3; emergency braking (beyond comfortable) skips it
    PREVIEW_S = 6.0
    # Softer lateral control than highway-env's default (0.6 s, 0.2 s): lane changes take about 3 s.
    KP_LATERAL = 1 / 2.0
    KP_HEADING = 1 / 0.5
    TAU_PURSUIT = 0.25

    speed_profile: CurveSpeedProfile | None = None
    _accel_mps2 = 0.0

    def act(self, action: dict | str | None = None) -> None:
        desired_mps = self.target_speed
        if self.speed_profile is not None:
            position_map = np.array([self.position[0], -self.position[1]])
            preview_m = max(self.speed, 5.0) * self.PREVIEW_S
            self.target_speed = min(
                desired_mps, self.speed_profile.allowed_speed_mps(position_map, preview_m)
            )
        super().act(action)
        self.target_speed = desired_mps
        if self.crashed:
            return
        wanted = self.action["acceleration"]
        step = self.JERK_MAX_MPS3 / SIM_HZ
        low = self._accel_mps2 - step if wanted >= self.COMFORT_ACC_MIN else -self.ACC_MAX
        self._accel_mps2 = float(np.clip(wanted, low, self._accel_mps2 + step))
        self.action["acceleration"] = max(self._accel_mps2, -self.speed * SIM_HZ)


class JunctionExpert(ExpertDriver):
    """The expert in junctions: tighter lane keeping (between ours and highway-env's 0.6 s / 0.2 s) for tight
    turns and sine-shaped entries. Lane changes are off there, so soft lane-change gains are not needed."""

    KP_LATERAL = 1 / 1.0
    KP_HEADING = 1 / 0.3
    TAU_PURSUIT = 0.15
