"""Tracks a planned trajectory with pure pursuit (steering) and speed tracking (acceleration).

The plan is 8 ego-frame waypoints at 0.5 s, stored in the map frame when it arrives so it can be followed
between re-plans. Pure pursuit works from the rear axle, which in highway-env's kinematic bicycle (centre of
mass mid-wheelbase) moves along the heading; the controller knows nothing else about the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.geometry import ego_to_map, map_to_ego
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS, WAYPOINT_DT_S
from wamdiff2_ros.sim.scene_types import AgentState


@dataclass(frozen=True)
class ControllerConfig:
    """Gains and limits of the tracker."""

    wheelbase_m: float = 5.0  # highway-env's Vehicle.LENGTH, which its bicycle model uses
    lookahead_min_m: float = 3.0
    lookahead_time_s: float = 0.4  # lookahead distance = max(min, speed * time)
    speed_gain_per_s: float = 1.5  # acceleration per m/s of speed error, on top of the plan's own
    speed_preview_s: float = 0.3  # track the plan's speed this far ahead (actuation lag)
    max_steering_rad: float = np.pi / 3
    accel_min_mps2: float = -6.0
    accel_max_mps2: float = 3.0


class TrajectoryController:
    """Pure pursuit and speed tracking of the latest plan."""

    def __init__(self, config: ControllerConfig = ControllerConfig()):
        self.config = config
        self._path_map: np.ndarray | None = None  # (9, 2): the ego position at plan time, then the waypoints
        self._speeds_mps: np.ndarray | None = None  # (9,) at t = 0, 0.25, 0.75, ... 3.75 s after plan time
        self._plan_time_s = 0.0

    def set_plan(self, waypoints_ego: np.ndarray, ego: AgentState, time_s: float) -> None:
        """Adopt a new plan made at ``time_s`` when the ego was at ``ego``."""
        path_ego = np.concatenate([np.zeros((1, 2)), np.asarray(waypoints_ego, dtype=np.float64)])
        self._path_map = ego_to_map(path_ego, ego.xy, ego.yaw_rad)
        step_speeds = np.linalg.norm(np.diff(path_ego, axis=0), axis=1) / WAYPOINT_DT_S
        self._speeds_mps = np.concatenate([[ego.speed_mps], step_speeds])
        self._plan_time_s = time_s

    def _speed_reference(self, time_s: float) -> tuple[float, float]:
        """The plan's speed (m/s) and its rate of change (m/s^2, the feed-forward) at ``time_s`` + preview."""
        times_s = np.concatenate([[0.0], (np.arange(NUM_WAYPOINTS) + 0.5) * WAYPOINT_DT_S])
        elapsed_s = time_s - self._plan_time_s + self.config.speed_preview_s
        speed_mps = float(np.interp(elapsed_s, times_s, self._speeds_mps))
        rates = np.diff(self._speeds_mps) / np.diff(times_s)
        accel_mps2 = float(np.interp(elapsed_s, (times_s[1:] + times_s[:-1]) / 2, rates))
        return speed_mps, accel_mps2

    def _lookahead_point(self, ego: AgentState) -> np.ndarray:
        """Where the path ahead first reaches the lookahead distance from the rear axle, in its frame.

        The path is linearly interpolated between waypoints and extended straight past its end.
        """
        # Measured from the rear axle (half a wheelbase behind the centre), pure pursuit's reference point.
        path_ego = map_to_ego(self._path_map, ego.xy, ego.yaw_rad) + np.array(
            [self.config.wheelbase_m / 2, 0.0]
        )
        tail = path_ego[-1] - path_ego[-2]
        norm = float(np.linalg.norm(tail))
        direction = tail / norm if norm > 1e-6 else np.array([1.0, 0.0])
        lookahead_m = max(self.config.lookahead_min_m, ego.speed_mps * self.config.lookahead_time_s)
        path_ego = np.concatenate([path_ego, path_ego[-1:] + 2.0 * lookahead_m * direction])
        distances = np.linalg.norm(path_ego, axis=1)
        # The nearest path point at or behind the ego starts the search, so passed waypoints are ignored.
        start = (
            int(np.argmin(np.where(path_ego[:, 0] <= 0.0, distances, np.inf)))
            if (path_ego[:, 0] <= 0).any()
            else 0
        )
        for k in range(start, len(path_ego) - 1):
            if distances[k + 1] >= lookahead_m:
                a, b = path_ego[k], path_ego[k + 1]
                # Solve |a + t (b - a)| = lookahead for t in [0, 1].
                d = b - a
                qa, qb, qc = d @ d, 2 * (a @ d), a @ a - lookahead_m**2
                t = (-qb + np.sqrt(max(qb * qb - 4 * qa * qc, 0.0))) / (2 * qa) if qa > 1e-12 else 1.0
                return a + float(np.clip(t, 0.0, 1.0)) * d
        return path_ego[-1]

    def control(self, ego: AgentState, time_s: float) -> tuple[float, float]:
        """Steering angle (rad, left positive) and acceleration (m/s^2) for the current state.

        Returns (0, full brake) before the first plan.
        """
        cfg = self.config
        if self._path_map is None:
            return 0.0, cfg.accel_min_mps2
        target = self._lookahead_point(ego)  # from the rear axle
        curvature = 2.0 * target[1] / max(float(target @ target), 1e-6)  # pure pursuit: kappa = 2 y / d^2
        # The rear axle moves along the heading, on a circle of curvature tan(delta) / L.
        steering_rad = float(np.arctan(curvature * cfg.wheelbase_m))
        target_speed_mps, feed_forward_mps2 = self._speed_reference(time_s)
        accel_mps2 = feed_forward_mps2 + cfg.speed_gain_per_s * (target_speed_mps - ego.speed_mps)
        if target_speed_mps < 0.2 and ego.speed_mps < 0.5:  # hold still rather than creep
            accel_mps2 = -ego.speed_mps / 0.1
        return (
            float(np.clip(steering_rad, -cfg.max_steering_rad, cfg.max_steering_rad)),
            float(np.clip(accel_mps2, cfg.accel_min_mps2, cfg.accel_max_mps2)),
        )
