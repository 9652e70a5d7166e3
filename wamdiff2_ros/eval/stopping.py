"""The scorer's own candidate: stop along the planner's path before the first detected vehicle on it.

When every planned candidate runs into a detected vehicle, choosing the best-scored of them still drives
into it. An automatic emergency brake does better: keep the path the planner chose and decelerate so that
the ego stands ``margin_m`` short of where its box would first touch a vehicle, as gently as that allows
and at most at ``max_decel_mps2``. The vehicles are where the scorer placed them, standing still.
"""

from __future__ import annotations

import numpy as np

from wamdiff2_ros.eval.metrics import EGO_LENGTH_M, EGO_WIDTH_M, Agents, boxes_overlap, footprints
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS, WAYPOINT_DT_S

PATH_STEP_M = 0.25  # spacing of the poses tested for contact along the path
MIN_SEGMENT_M = 1e-3  # shorter path segments (a plan standing still) carry no direction


def _path_with_arc(waypoints_ego: np.ndarray, reach_m: float) -> tuple[np.ndarray, np.ndarray]:
    """The ego's path (the origin, then the waypoints, then straight on) long enough to reach ``reach_m``,
    and the arc length at each of its points."""
    path = np.concatenate([np.zeros((1, 2)), np.asarray(waypoints_ego, dtype=np.float64)])
    steps = np.linalg.norm(np.diff(path, axis=0), axis=1)
    path = path[np.concatenate([[True], steps > MIN_SEGMENT_M])]
    if len(path) == 1:  # the plan stands still: straight ahead
        path = np.array([[0.0, 0.0], [1.0, 0.0]])
    arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(path, axis=0), axis=1))])
    tail = (path[-1] - path[-2]) / (arc_m[-1] - arc_m[-2])
    extra_m = max(reach_m - arc_m[-1], 0.0) + 1.0
    return np.concatenate([path, path[-1:] + extra_m * tail]), np.concatenate([arc_m, [arc_m[-1] + extra_m]])


def _points_at(path: np.ndarray, arc_m: np.ndarray, s_m: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(s_m, arc_m, path[:, 0]), np.interp(s_m, arc_m, path[:, 1])], axis=-1)


def first_contact_m(path: np.ndarray, arc_m: np.ndarray, agents: Agents) -> float | None:
    """Arc length along ``path`` where the ego's box first touches a vehicle standing at its current pose
    (None: it touches none)."""
    if not len(agents.poses_ego):
        return None
    s_m = np.arange(0.0, arc_m[-1], PATH_STEP_M)
    points = _points_at(path, arc_m, s_m)
    ahead = _points_at(path, arc_m, s_m + PATH_STEP_M) - points
    poses = np.concatenate([points, np.arctan2(ahead[:, 1], ahead[:, 0])[:, None]], axis=1)
    centres, sizes = agents.poses_ego[:, 0], agents.sizes_m
    known = np.isfinite(centres).all(axis=1)
    centres, sizes = centres[known], sizes[known]
    # Two boxes can only touch where their centres are within their half-diagonals: test those pairs only.
    reach_m = np.hypot(EGO_LENGTH_M, EGO_WIDTH_M) / 2.0 + np.hypot(sizes[:, 0], sizes[:, 1]) / 2.0
    near = np.linalg.norm(points[:, None] - centres[None, :, :2], axis=-1) <= reach_m  # (S, N)
    samples, others = np.nonzero(near)
    if not len(samples):
        return None
    ego = footprints(poses[None, samples], np.array([[EGO_LENGTH_M, EGO_WIDTH_M]]))[0]  # (P, 4, 2)
    vehicles = footprints(centres[others][:, None], sizes[others])[:, 0]  # (P, 4, 2)
    touching = samples[boxes_overlap(ego, vehicles)]
    return float(s_m[touching.min()]) if len(touching) else None


def stopping_trajectory(
    waypoints_ego: np.ndarray,
    speed_mps: float,
    agents: Agents,
    margin_m: float = 2.0,
    max_decel_mps2: float = 6.0,
) -> np.ndarray | None:
    """The (8, 2) waypoints that follow ``waypoints_ego``'s path and stop short of the first vehicle on it
    (None: no vehicle is on the path within the plan's reach or the distance the ego covers at
    ``speed_mps`` over the horizon).

    Args:
        waypoints_ego: the planner's (8, 2) plan whose path is kept.
        speed_mps: the ego's current speed.
        agents: detected vehicles (their poses at t = 0 are used).
        margin_m: gap to keep between the ego's box and the vehicle's.
        max_decel_mps2: the hardest braking planned (the brake beyond which the stop is not reached).
    """
    speed_mps = max(float(speed_mps), 0.0)
    horizon_m = speed_mps * NUM_WAYPOINTS * WAYPOINT_DT_S
    path, arc_m = _path_with_arc(waypoints_ego, horizon_m)
    contact_m = first_contact_m(path, arc_m, agents)
    if contact_m is None:
        return None
    room_m = contact_m - margin_m
    decel_mps2 = max_decel_mps2 if room_m <= 0.0 else min(speed_mps**2 / (2.0 * room_m), max_decel_mps2)
    times_s = WAYPOINT_DT_S * np.arange(1, NUM_WAYPOINTS + 1)
    if decel_mps2 <= 0.0:  # standing still already
        return np.zeros((NUM_WAYPOINTS, 2))
    stop_s = speed_mps / decel_mps2
    braking_m = speed_mps * times_s - decel_mps2 * times_s**2 / 2.0
    travelled_m = np.where(times_s < stop_s, braking_m, speed_mps**2 / (2.0 * decel_mps2))
    return _points_at(path, arc_m, travelled_m)
