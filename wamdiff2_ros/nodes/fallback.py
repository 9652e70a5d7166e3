"""What the planner publishes when the model gives no usable plan: a held plan, or a stop trajectory.

Both are plain numpy and always finite. A held plan is the last good plan advanced by the time elapsed since
its source frame (the ego is assumed to have followed it; rotation over that short time is ignored). A stop
trajectory brakes along the current heading at a comfortable deceleration and stays stopped.
"""

from __future__ import annotations

import numpy as np

STOP_DECELERATION_MPS2 = 3.0  # firm but comfortable (NAVSIM comfort bound on longitudinal deceleration: 4.05)


def stop_trajectory(speed_mps: float, num_points: int = 8, dt_s: float = 0.5) -> np.ndarray:
    """(N, 2) ego-frame waypoints of braking from ``speed_mps`` to a standstill straight ahead."""
    speed = max(float(speed_mps), 0.0) if np.isfinite(speed_mps) else 0.0
    times = dt_s * np.arange(1, num_points + 1)
    stop_time = speed / STOP_DECELERATION_MPS2
    t = np.minimum(times, stop_time)
    distance = speed * t - 0.5 * STOP_DECELERATION_MPS2 * t**2
    return np.stack([distance, np.zeros_like(distance)], axis=1)


def advance_plan(waypoints_ego: np.ndarray, elapsed_s: float, dt_s: float = 0.5) -> np.ndarray:
    """The plan seen from where it says the ego is ``elapsed_s`` later, still ``dt_s`` apart.

    Positions along the plan are linearly interpolated in time (the origin is the plan at t = 0); beyond the
    plan's end the last segment's velocity is held, so the result always has the input's length.
    """
    waypoints = np.asarray(waypoints_ego, dtype=np.float64)
    times = dt_s * np.arange(len(waypoints) + 1)
    points = np.vstack([[0.0, 0.0], waypoints])
    end_velocity = (points[-1] - points[-2]) / dt_s

    def at(t: np.ndarray) -> np.ndarray:
        inside = np.stack([np.interp(t, times, points[:, k]) for k in range(2)], axis=1)
        beyond = points[-1] + np.maximum(t - times[-1], 0.0)[:, None] * end_velocity
        return np.where((t > times[-1])[:, None], beyond, inside)

    origin = at(np.array([elapsed_s]))[0]
    return at(elapsed_s + times[1:]) - origin
