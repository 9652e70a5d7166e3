"""Online PDM-style scoring of candidate trajectories from what a car sees: 2D detections and its own speed.

The offline metrics (``eval.metrics``) know every agent's true future and the drivable area. Online, the
scorer knows only camera boxes, so it places each box on the ground through the camera model (flat ground,
the box's bottom edge is the vehicle's rear, the vehicle is aligned with the ego and stays where it is over
the horizon) and bounds the drivable area by a straight corridor. Progress is measured against the candidate
that gets farthest, as NAVSIM normalises by its best proposal. Same sub-scores and composition as offline.
When every candidate runs into a detected vehicle, the scorer adds one of its own and drives it: the
planner's first path, braked to stand before that vehicle (``eval.stopping``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.metrics import Agents, DrivableArea, ScoringContext, pdm_subscores
from wamdiff2_ros.eval.stopping import stopping_trajectory
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS

# ``first_safe``: the scorer as a safety filter on the planner's own choice. Driving the highest PDM score
# (``pdm``) cost the closed loop: its straight corridor and static boxes cannot see a route that turns, and
# its progress term rewards the faster sample (docs/DECISIONS.md, "the scorer drives the planner's plan").
SELECTIONS = ("first_safe", "pdm")


@dataclass(frozen=True)
class ScorerSettings:
    """Assumptions of online scoring.

    Attributes:
        lateral_bound_m: half width of the drivable corridor around the ego's x axis.
        corridor_length_m: how far ahead the corridor reaches.
        agent_length_m: length of a detected vehicle (its box gives only the rear's position).
        agent_width_m: width of a detected vehicle.
        selection: which candidate is driven (``SELECTIONS``): ``first_safe``, the first candidate that
            hits no detected vehicle (the planner's greedy plan comes first), the highest PDM score when
            every one does; ``pdm``, the highest PDM score.
        stop_when_blocked: when every candidate hits a detected vehicle, add and drive a stop along the
            first candidate's path (``eval.stopping``) instead of the best of them.
        stop_margin_m: the gap that stop leaves to the vehicle.
        max_decel_mps2: the hardest braking that stop plans.
        detections_max_age_s: boxes of a frame older than this (against the candidates' frame) are not
            used: a vehicle seen that long ago may be anywhere by now.
    """

    lateral_bound_m: float = 5.0
    corridor_length_m: float = 200.0
    agent_length_m: float = 4.5
    agent_width_m: float = 1.9
    selection: str = "first_safe"
    stop_when_blocked: bool = True
    stop_margin_m: float = 2.0
    max_decel_mps2: float = 6.0
    detections_max_age_s: float = 1.0

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise InputError(f"selection must be one of {SELECTIONS}, got {self.selection!r}")


def box_ground_points(boxes_px: np.ndarray, camera: Camera) -> np.ndarray:
    """The ground point (N, 2, ego frame) under each box's bottom centre through ``camera`` (flat ground);
    NaN rows for boxes whose bottom edge is at or above the horizon."""
    boxes = np.asarray(boxes_px, dtype=np.float64).reshape(-1, 4)
    if not len(boxes):
        return np.zeros((0, 2))
    return camera.pixel_to_ground(np.stack([(boxes[:, 0] + boxes[:, 2]) / 2.0, boxes[:, 3]], axis=1))


def agents_from_boxes(boxes_px: np.ndarray, camera: Camera, settings: ScorerSettings) -> Agents:
    """Detected vehicles as static agents in the ego frame.

    Args:
        boxes_px: (N, 4) x1, y1, x2, y2 in pixels of the camera's image.
        camera: the camera that took the image (intrinsics at that image size, mount on the ego).
        settings: assumed vehicle size.

    Returns:
        One agent per box whose bottom edge meets the ground ahead (boxes at or above the horizon: none).
    """
    rears = box_ground_points(boxes_px, camera)
    rears = rears[np.all(np.isfinite(rears), axis=1)]
    centres = rears + np.array([settings.agent_length_m / 2.0, 0.0])
    poses = np.zeros((len(centres), NUM_WAYPOINTS, 3))
    poses[:, :, :2] = centres[:, None, :]
    sizes = np.tile([settings.agent_length_m, settings.agent_width_m], (len(centres), 1))
    return Agents(poses, sizes)


def corridor(settings: ScorerSettings) -> DrivableArea:
    """A straight corridor from a little behind the ego to ``corridor_length_m`` ahead."""
    b, length = settings.lateral_bound_m, settings.corridor_length_m
    return DrivableArea((np.array([[-10.0, -b], [length, -b], [length, b], [-10.0, b]]),))


@dataclass(frozen=True)
class ScoredCandidates:
    """What the scorer decided.

    Attributes:
        trajectories: the planner's candidates, then the scorer's stop when it added one.
        scores: one dict per trajectory (keys of ``eval.metrics.pdm_subscores``).
        selected: index of the trajectory to drive (-1: there were no candidates).
        stopped: the last trajectory is the scorer's stop, and the one selected (every candidate hit a
            detected vehicle).
    """

    trajectories: list[np.ndarray]
    scores: list[dict]
    selected: int
    stopped: bool = False


def score_candidates(
    candidates_ego: Sequence[np.ndarray],
    velocity_ego_mps: Sequence[float],
    agents: Agents,
    settings: ScorerSettings | None = None,
) -> ScoredCandidates:
    """Sub-scores and PDM score of each candidate, and which trajectory to drive (``settings.selection``;
    ties of the PDM score: the earliest); with ``settings.stop_when_blocked``, the scorer's stop when every
    candidate hits a detected vehicle.

    Args:
        candidates_ego: (8, 2) waypoint arrays in the ego frame.
        velocity_ego_mps: the ego's current (vx, vy).
        agents: detected agents (``agents_from_boxes``).
        settings: corridor and vehicle assumptions.

    Raises:
        InputError: a candidate is not a finite (8, 2) array.
    """
    if not candidates_ego:
        return ScoredCandidates([], [], -1)
    settings = settings or ScorerSettings()
    trajectories = [np.asarray(c, dtype=np.float64) for c in candidates_ego]
    farthest = max(trajectories, key=lambda c: float(np.linalg.norm(c[-1])))
    context = ScoringContext(
        agents=agents,
        reference_ego=farthest,
        velocity_ego_mps=np.asarray(velocity_ego_mps, dtype=np.float64),
        drivable=corridor(settings),
        current_agents_ego=agents.poses_ego[:, 0],
    )
    scores = [pdm_subscores(c, context) for c in trajectories]
    safe = [index for index, s in enumerate(scores) if s["no_collision"] > 0.0]
    if not safe and settings.stop_when_blocked:
        speed_mps = float(np.linalg.norm(context.velocity_ego_mps))
        stop = stopping_trajectory(
            trajectories[0], speed_mps, agents, settings.stop_margin_m, settings.max_decel_mps2
        )
        if stop is not None:
            scores.append(pdm_subscores(stop, context))
            return ScoredCandidates([*trajectories, stop], scores, len(trajectories), stopped=True)
    best = int(np.argmax([s["pdm_score"] for s in scores]))
    if settings.selection == "pdm" or not safe:
        return ScoredCandidates(trajectories, scores, best)
    return ScoredCandidates(trajectories, scores, safe[0])
