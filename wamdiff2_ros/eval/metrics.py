"""Planning metrics on ego-frame waypoints: L2, ADE/FDE, collisions, a PDM-style score, the driving score.

One code path for offline evaluation and the scorer node: inputs are plain arrays in the ego frame (x forward,
y left, metres; 8 waypoints at 0.5 s) plus optional agents and drivable area. Formulas: docs/METRICS.md.
Detection mAP and QA match live in ``detection.py`` and ``qa.py``; nothing here reads files or simulates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS, WAYPOINT_DT_S

EGO_LENGTH_M, EGO_WIDTH_M = 5.0, 2.0
TTC_HORIZONS_S = (0.3, 0.6, 0.9)  # NAVSIM flags a time to collision below 0.9 s
MIN_PROGRESS_M = 5.0  # below this reference progress, ego progress counts as full (NAVSIM)
STOPPED_STEP_M = 0.05  # per 0.5 s: the ego is standing still
HEADING_STEP_M = 0.5  # per 0.5 s: below 1 m/s a step's direction is noise, so the heading is held
# NAVSIM comfort bounds (pdm_comfort_metrics.py, from nuPlan): accelerations, jerks, yaw rate, yaw accel.
COMFORT_LIMITS = {
    "lon_accel_min_mps2": -4.05,
    "lon_accel_max_mps2": 2.40,
    "lat_accel_max_mps2": 4.89,
    "jerk_max_mps3": 8.37,  # magnitude of the jerk vector
    "lon_jerk_max_mps3": 4.13,
    "yaw_rate_max_radps": 0.95,
    "yaw_accel_max_radps2": 1.93,
}
PDM_WEIGHTS = {"time_to_collision": 5.0, "comfort": 2.0, "ego_progress": 5.0}
# A speed change between consecutive 0.5 s steps no car makes (16 m/s^2): a plan that has one wrote a value
# wrong (a block-diffusion student laying out "1.08" for "10.05"), it did not plan hard braking.
JUMP_MPS = 8.0
# Infraction penalties multiply the route completion (CARLA leaderboard / Bench2Drive values).
INFRACTION_PENALTIES = {"collision_vehicle": 0.60, "off_road": 0.65}


def _check_waypoints(waypoints_ego: np.ndarray, name: str) -> np.ndarray:
    waypoints_ego = np.asarray(waypoints_ego, dtype=np.float64)
    if waypoints_ego.shape[-2:] != (NUM_WAYPOINTS, 2):
        raise InputError(f"{name} must have shape (..., {NUM_WAYPOINTS}, 2), got {waypoints_ego.shape}")
    return waypoints_ego


def l2_per_waypoint(pred_ego: np.ndarray, truth_ego: np.ndarray) -> np.ndarray:
    """Euclidean distance (..., 8) between predicted and true waypoints, metres.

    Raises:
        InputError: shapes other than (..., 8, 2) or different shapes.
    """
    pred_ego, truth_ego = _check_waypoints(pred_ego, "prediction"), _check_waypoints(truth_ego, "truth")
    if pred_ego.shape != truth_ego.shape:
        raise InputError(f"prediction {pred_ego.shape} and truth {truth_ego.shape} differ in shape")
    return np.linalg.norm(pred_ego - truth_ego, axis=-1)


def displacement_errors(pred_ego: np.ndarray, truth_ego: np.ndarray) -> dict:
    """Mean over samples (S, 8, 2) of L2 per waypoint, ADE (mean over waypoints) and FDE (last waypoint)."""
    l2_m = l2_per_waypoint(pred_ego, truth_ego).reshape(-1, NUM_WAYPOINTS)
    return {
        "l2_per_waypoint_m": l2_m.mean(axis=0).tolist(),
        "ade_m": float(l2_m.mean()),
        "fde_m": float(l2_m[:, -1].mean()),
    }


def headings_from_waypoints(waypoints_ego: np.ndarray, initial_heading_rad: float = 0.0) -> np.ndarray:
    """Direction of travel (8,) at each waypoint from the step that reaches it, starting from the origin.

    A step shorter than 0.5 m (below 1 m/s) or pointing backwards (reversing) keeps the previous heading;
    ``initial_heading_rad`` is the heading before the first step (0: along the ego's x axis).
    """
    points = np.concatenate([np.zeros((1, 2)), _check_waypoints(waypoints_ego, "waypoints")])
    steps = np.diff(points, axis=0)
    headings = np.zeros(NUM_WAYPOINTS)
    previous = initial_heading_rad
    for k, (dx, dy) in enumerate(steps):
        length_m = np.hypot(dx, dy)
        reversing = (
            dx * np.cos(previous) + dy * np.sin(previous) < -0.5 * length_m
        )  # more than 120 degrees off
        if length_m > HEADING_STEP_M and not reversing:
            previous = float(np.arctan2(dy, dx))
        headings[k] = previous
    return headings


def boxes_overlap(corners_a: np.ndarray, corners_b: np.ndarray) -> np.ndarray:
    """Separating-axis test for oriented rectangles (..., 4, 2); True where they intersect or touch."""
    corners_a, corners_b = np.broadcast_arrays(np.asarray(corners_a, float), np.asarray(corners_b, float))
    overlap = np.ones(corners_a.shape[:-2], dtype=bool)
    for corners in (corners_a, corners_b):
        for edge in range(2):  # a rectangle has two edge directions
            axis = corners[..., edge + 1, :] - corners[..., edge, :]
            normal = np.stack([-axis[..., 1], axis[..., 0]], axis=-1)[..., None, :]
            proj_a, proj_b = (corners_a * normal).sum(-1), (corners_b * normal).sum(-1)
            overlap &= (proj_a.max(-1) >= proj_b.min(-1)) & (proj_b.max(-1) >= proj_a.min(-1))
    return overlap


def footprints(poses: np.ndarray, sizes_m: np.ndarray) -> np.ndarray:
    """Footprint corners (N, T, 4, 2) of N boxes over T steps; ``poses`` (N, T, 3), ``sizes_m`` (N, 2)."""
    unit = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.float64) / 2.0
    half = unit[None, None] * np.asarray(sizes_m, dtype=np.float64)[:, None, None, :]  # (N, 1, 4, 2)
    c, s = np.cos(poses[..., 2])[..., None], np.sin(poses[..., 2])[..., None]
    x = half[..., 0] * c - half[..., 1] * s
    y = half[..., 0] * s + half[..., 1] * c
    return poses[..., None, :2] + np.stack([x, y], axis=-1)


@dataclass(frozen=True)
class Agents:
    """Other vehicles over the horizon in the ego frame: poses (N, 8, 3) x, y, yaw; NaN where unknown."""

    poses_ego: np.ndarray
    sizes_m: np.ndarray  # (N, 2) length, width

    @classmethod
    def none(cls) -> Agents:
        return cls(np.zeros((0, NUM_WAYPOINTS, 3)), np.zeros((0, 2)))

    def velocities_mps(self, current_ego: np.ndarray | None = None) -> np.ndarray:
        """Finite-difference velocities (N, 8, 2); the first step uses ``current_ego`` (N, 3) when given."""
        previous = self.poses_ego[:, :1, :2] if current_ego is None else current_ego[:, None, :2]
        points = np.concatenate([previous, self.poses_ego[..., :2]], axis=1)
        velocities = np.diff(points, axis=1) / WAYPOINT_DT_S
        if current_ego is None:
            velocities[:, 0] = velocities[:, 1]
        return velocities


class DrivableArea:
    """The union of polygons (K, 2) in the ego frame; a point on an edge may fall either way."""

    def __init__(self, polygons_ego: tuple[np.ndarray, ...]):
        self.polygons_ego = tuple(np.asarray(p, dtype=np.float64) for p in polygons_ego)

    def contains(self, points_ego: np.ndarray) -> np.ndarray:
        """Whether each point (..., 2) lies inside any polygon (even-odd rule)."""
        points = np.asarray(points_ego, dtype=np.float64)
        flat = points.reshape(-1, 2)
        inside_any = np.zeros(len(flat), dtype=bool)
        for polygon in self.polygons_ego:
            a, b = polygon, np.roll(polygon, -1, axis=0)  # edges a -> b, (E, 2)
            px, py = flat[:, None, 0], flat[:, None, 1]
            crosses = (a[:, 1] > py) != (b[:, 1] > py)
            with np.errstate(divide="ignore", invalid="ignore"):
                x_at = a[:, 0] + (py - a[:, 1]) * (b[:, 0] - a[:, 0]) / (b[:, 1] - a[:, 1])
            inside_any |= (np.count_nonzero(crosses & (px < x_at), axis=1) % 2) == 1
        return inside_any.reshape(points.shape[:-1])


def ego_poses(waypoints_ego: np.ndarray) -> np.ndarray:
    """Waypoints (8, 2) with headings from ``headings_from_waypoints``, as (1, 8, 3) poses."""
    return np.concatenate([waypoints_ego, headings_from_waypoints(waypoints_ego)[:, None]], axis=1)[None]


def collision_steps(waypoints_ego: np.ndarray, agents: Agents) -> np.ndarray:
    """Per waypoint and agent (N, 8): the ego box at that waypoint overlaps the agent at the same time."""
    ego = footprints(ego_poses(waypoints_ego), np.array([[EGO_LENGTH_M, EGO_WIDTH_M]]))  # (1, 8, 4, 2)
    known = ~np.isnan(agents.poses_ego).any(axis=-1)  # (N, 8)
    poses = np.where(known[..., None], agents.poses_ego, 1e6)  # unknown agents parked far away
    return boxes_overlap(ego, footprints(poses, agents.sizes_m)) & known


def collides(waypoints_ego: np.ndarray, agents: Agents) -> bool:
    """Whether the trajectory overlaps any agent's true future box at any waypoint."""
    return bool(collision_steps(waypoints_ego, agents).any())


def no_at_fault_collision(waypoints_ego: np.ndarray, agents: Agents) -> float:
    """NAVSIM NC, vehicles only: 0 on a collision the ego causes, else 1.

    Not at fault: the ego stands still at that step, or the agent is behind the ego's rear (it ran into us).
    """
    hits = collision_steps(waypoints_ego, agents)
    steps_m = np.linalg.norm(np.diff(np.concatenate([np.zeros((1, 2)), waypoints_ego]), axis=0), axis=1)
    headings = headings_from_waypoints(waypoints_ego)
    for agent, step in zip(*np.nonzero(hits), strict=True):
        offset = agents.poses_ego[agent, step, :2] - waypoints_ego[step]
        ahead_m = offset[0] * np.cos(headings[step]) + offset[1] * np.sin(headings[step])
        if steps_m[step] > STOPPED_STEP_M and ahead_m > -EGO_LENGTH_M / 2:
            return 0.0
    return 1.0


def drivable_area_compliance(waypoints_ego: np.ndarray, drivable: DrivableArea | None) -> float:
    """NAVSIM DAC: 1 when every corner of the ego box at every waypoint is on the drivable area, else 0."""
    if drivable is None:
        return 1.0
    corners = footprints(ego_poses(waypoints_ego), np.array([[EGO_LENGTH_M, EGO_WIDTH_M]]))
    return float(drivable.contains(corners).all())


def time_to_collision_ok(
    waypoints_ego: np.ndarray, agents: Agents, current_agents_ego: np.ndarray | None = None
) -> float:
    """NAVSIM TTC: 0 when, at some waypoint, ego and an agent ahead, both kept at their velocities, would
    collide within 0.9 s without colliding now; else 1. A standing ego never fails it."""
    if len(agents.poses_ego) == 0:
        return 1.0
    ego = ego_poses(waypoints_ego)[0]  # (8, 3)
    ego_velocity = np.diff(np.concatenate([np.zeros((1, 2)), waypoints_ego]), axis=0) / WAYPOINT_DT_S
    agent_velocity = agents.velocities_mps(current_agents_ego)
    colliding_now = collision_steps(waypoints_ego, agents)  # (N, 8)
    ego_size = np.array([[EGO_LENGTH_M, EGO_WIDTH_M]])
    for step in range(NUM_WAYPOINTS):
        if np.linalg.norm(ego_velocity[step]) * WAYPOINT_DT_S <= STOPPED_STEP_M:
            continue
        heading = ego[step, 2]
        offsets = agents.poses_ego[:, step, :2] - ego[step, :2]
        ahead = offsets @ np.array([np.cos(heading), np.sin(heading)]) > 0.0
        for horizon_s in TTC_HORIZONS_S:
            ego_future = ego[step].copy()
            ego_future[:2] += ego_velocity[step] * horizon_s
            agent_future = agents.poses_ego[:, step].copy()
            agent_future[:, :2] += agent_velocity[:, step] * horizon_s
            known = ~np.isnan(agent_future).any(axis=-1)
            agent_future = np.where(known[:, None], agent_future, 1e6)
            hit = boxes_overlap(
                footprints(ego_future[None, None], ego_size)[0, 0],
                footprints(agent_future[:, None], agents.sizes_m)[:, 0],
            )
            if (hit & known & ahead & ~colliding_now[:, step]).any():
                return 0.0
    return 1.0


def progress_along(path_ego: np.ndarray, point_ego: np.ndarray) -> float:
    """Arc length (m) along the polyline ``path_ego`` (P, 2) of the projection of ``point_ego`` onto it."""
    a, b = path_ego[:-1], path_ego[1:]
    seg = b - a
    seg_len_m = np.linalg.norm(seg, axis=1)
    t = np.clip(((point_ego - a) * seg).sum(1) / np.maximum(seg_len_m**2, 1e-12), 0.0, 1.0)
    nearest = int(np.argmin(np.linalg.norm(a + t[:, None] * seg - point_ego, axis=1)))
    return float(np.concatenate([[0.0], np.cumsum(seg_len_m)])[nearest] + t[nearest] * seg_len_m[nearest])


def ego_progress(waypoints_ego: np.ndarray, reference_ego: np.ndarray) -> float:
    """NAVSIM EP: progress of the last waypoint along the reference path (origin then ``reference_ego``),
    divided by the reference's own progress, clipped to [0, 1]; 1 when the reference moves under 5 m."""
    path = np.concatenate([np.zeros((1, 2)), reference_ego])
    reference_m = progress_along(path, reference_ego[-1])
    if reference_m < MIN_PROGRESS_M:
        return 1.0
    return float(np.clip(progress_along(path, waypoints_ego[-1]) / reference_m, 0.0, 1.0))


def comfort_terms(waypoints_ego: np.ndarray, velocity_ego_mps: np.ndarray) -> dict:
    """Largest longitudinal/lateral acceleration, jerk, yaw rate and yaw acceleration along the trajectory.

    Finite differences: the current velocity at t = 0, then each step's mean velocity at the step's middle
    (t = 0.25, 0.75, ... s); each derivative sits between the samples it comes from.
    """
    steps = np.diff(np.concatenate([np.zeros((1, 2)), waypoints_ego]), axis=0)
    velocities = np.concatenate([np.asarray(velocity_ego_mps, dtype=np.float64)[None], steps / WAYPOINT_DT_S])
    t_v = np.concatenate([[0.0], (np.arange(NUM_WAYPOINTS) + 0.5) * WAYPOINT_DT_S])
    accel = np.diff(velocities, axis=0) / np.diff(t_v)[:, None]  # (8, 2) in the ego frame at t = 0
    t_a = (t_v[1:] + t_v[:-1]) / 2
    speed_mps = float(np.linalg.norm(velocities[0]))
    course_rad = float(np.arctan2(velocities[0, 1], velocities[0, 0])) if speed_mps > 1.0 else 0.0
    headings = headings_from_waypoints(waypoints_ego, course_rad)  # direction of each step's motion
    lon = accel[:, 0] * np.cos(headings) + accel[:, 1] * np.sin(headings)
    lat = -accel[:, 0] * np.sin(headings) + accel[:, 1] * np.cos(headings)
    jerk = np.linalg.norm(np.diff(accel, axis=0), axis=1) / np.diff(t_a)
    lon_jerk = np.diff(lon) / np.diff(t_a)
    yaw_rate = np.diff(np.unwrap(np.concatenate([[course_rad], headings]))) / np.diff(t_v)
    yaw_accel = np.diff(yaw_rate) / np.diff(t_a)
    return {
        "lon_accel_min_mps2": float(lon.min()),
        "lon_accel_max_mps2": float(lon.max()),
        "lat_accel_max_mps2": float(np.abs(lat).max()),
        "jerk_max_mps3": float(jerk.max()),
        "lon_jerk_max_mps3": float(np.abs(lon_jerk).max()),
        "yaw_rate_max_radps": float(np.abs(yaw_rate).max()),
        "yaw_accel_max_radps2": float(np.abs(yaw_accel).max()),
    }


def speed_jump(waypoints_ego: np.ndarray, max_change_mps: float = JUMP_MPS) -> bool:
    """True when the speed of consecutive 0.5 s steps (the first from the origin) changes by more than
    ``max_change_mps``."""
    steps = np.diff(np.concatenate([np.zeros((1, 2)), waypoints_ego]), axis=0)
    speeds = np.linalg.norm(steps, axis=1) / WAYPOINT_DT_S
    return bool(np.any(np.abs(np.diff(speeds)) > max_change_mps))


def comfort(waypoints_ego: np.ndarray, velocity_ego_mps: np.ndarray) -> float:
    """NAVSIM C: 1 when every comfort term is within ``COMFORT_LIMITS``, else 0."""
    terms = comfort_terms(waypoints_ego, velocity_ego_mps)
    within = [
        terms[name] >= limit if name.endswith("_min_mps2") else terms[name] <= limit
        for name, limit in COMFORT_LIMITS.items()
    ]
    return float(all(within))


@dataclass(frozen=True)
class ScoringContext:
    """What scoring a trajectory needs besides the trajectory, all in the ego frame at t = 0."""

    agents: Agents
    reference_ego: np.ndarray  # (8, 2) path that defines progress (the expert's, or the route ahead)
    velocity_ego_mps: np.ndarray  # (2,)
    drivable: DrivableArea | None = None
    current_agents_ego: np.ndarray | None = None  # (N, 3) agents' poses at t = 0, for their first velocity


def pdm_subscores(waypoints_ego: np.ndarray, context: ScoringContext) -> dict:
    """The five NAVSIM sub-scores and their composition into the PDM score.

    PDMS = NC * DAC * (5 * TTC + 2 * C + 5 * EP) / 12.

    Raises:
        InputError: waypoints not a finite (8, 2) array.
    """
    waypoints_ego = _check_waypoints(waypoints_ego, "waypoints")
    if not np.isfinite(waypoints_ego).all():
        raise InputError("waypoints must be finite")
    scores = {
        "no_collision": no_at_fault_collision(waypoints_ego, context.agents),
        "drivable_area": drivable_area_compliance(waypoints_ego, context.drivable),
        "time_to_collision": time_to_collision_ok(waypoints_ego, context.agents, context.current_agents_ego),
        "comfort": comfort(waypoints_ego, context.velocity_ego_mps),
        "ego_progress": ego_progress(waypoints_ego, context.reference_ego),
    }
    weighted = sum(weight * scores[name] for name, weight in PDM_WEIGHTS.items()) / sum(PDM_WEIGHTS.values())
    scores["pdm_score"] = scores["no_collision"] * scores["drivable_area"] * weighted
    return scores


def driving_score(route_completion: float, infractions: dict[str, int]) -> float:
    """CARLA-leaderboard style: route completion (0..1) times each infraction's penalty per occurrence.

    Raises:
        InputError: an infraction kind without a penalty, or completion outside [0, 1].
    """
    if not 0.0 <= route_completion <= 1.0:
        raise InputError(f"route completion must be in [0, 1], got {route_completion}")
    unknown = set(infractions) - set(INFRACTION_PENALTIES)
    if unknown:
        raise InputError(
            f"no penalty for infractions {sorted(unknown)}; known: {sorted(INFRACTION_PENALTIES)}"
        )
    penalty = float(np.prod([INFRACTION_PENALTIES[k] ** n for k, n in infractions.items()]))
    return route_completion * penalty
