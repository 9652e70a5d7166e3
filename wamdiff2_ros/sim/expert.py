"""Ground truth from a recorded drive: command, ego motion, expert waypoints, agents' futures, boxes, QA.

The expert is the IDM/MOBIL driver of ``drivers`` in the ego's seat; its realised future is the target.
``record_drive`` steps a scene into a log, the ground-truth functions read that log and a rendered frame, and
``expert_plan`` re-plans on a copy of a live road (the closed loop's privileged expert). Drawing is render's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import map_to_ego, wrap_angle
from wamdiff2_ros.model.plan_frame import route_window_ego
from wamdiff2_ros.model.prompt import (
    COMMAND_RULES,
    DEFAULT_COMMAND_RULE,
    DISTANCE_COMMAND_RULE,
    NUM_WAYPOINTS,
    ROUTE_COMMAND_RULE,
    WAYPOINT_DT_S,
    route_ahead,
)
from wamdiff2_ros.sim.engine import SIM_HZ
from wamdiff2_ros.sim.render import Frame
from wamdiff2_ros.sim.scene_types import LaneGeometry, Snapshot, to_map_xy
from wamdiff2_ros.sim.scenes import Scene

TICKS_PER_WAYPOINT = round(WAYPOINT_DT_S * SIM_HZ)
HORIZON_TICKS = NUM_WAYPOINTS * TICKS_PER_WAYPOINT
COMMAND_LOOKAHEAD_M = 50.0  # a turn within this distance along the route sets the command
TURN_THRESHOLD_RAD = np.radians(45.0)
CURVE_LOOKAHEAD_M = 80.0
CURVE_THRESHOLD_RAD = np.radians(10.0)
# Lanes widened by half a metre: highway-env's junction lanes do not tile the road surface exactly.
DRIVABLE_MARGIN_M = 0.5
DRIVABLE_RANGE_M = 150.0  # beyond the farthest waypoint (4 s at 30 m/s) plus a car length
MIN_VISIBLE_FRACTION = 0.25
MIN_BOX_HEIGHT_PX = 4.0
MAX_BOX_DISTANCE_M = 100.0
SAME_LANE_HALF_WIDTH_M = 1.8


@dataclass(frozen=True)
class AgentFutures:
    """Other vehicles over the horizon in the ego frame at the sample time; NaN where a vehicle is gone."""

    poses_ego: np.ndarray  # (N, 8, 3) x, y metres and yaw radians at t = 0.5 .. 4 s
    current_ego: np.ndarray  # (N, 3) at t = 0
    sizes_m: np.ndarray  # (N, 2) length, width


@dataclass(frozen=True)
class GroundTruth:
    """Everything one training or evaluation sample knows about its scene."""

    command: str  # left | straight | right
    velocity_ego_mps: np.ndarray  # (2,) vx, vy in the ego frame
    accel_ego_mps2: np.ndarray  # (2,) ax, ay in the ego frame
    waypoints_ego: np.ndarray  # (8, 2) expert positions at 0.5 .. 4 s
    agents: AgentFutures
    drivable_ego: tuple[
        np.ndarray, ...
    ]  # lane polygons (K, 2) in the ego frame; drivable area is their union
    boxes_px: np.ndarray  # (M, 4) x1, y1, x2, y2 of visible vehicles
    labels: tuple[str, ...]
    qa: tuple[tuple[str, str], ...]  # (question, answer) from scene facts
    command_distance_m: float | None = None  # to the command's branch (``navigation``); None: none given
    route_ahead_m: np.ndarray | None = (
        None  # (4, 2) the route's shape ahead (``navigation``); None: none given
    )
    route_ego_m: np.ndarray | None = None  # (M, 2) the route around the ego (``plan_frame.route_window_ego``)


def route_heading_change(route_map: np.ndarray, position_xy: np.ndarray, lookahead_m: float) -> float:
    """Heading change (rad, left positive) of a route between the point nearest ``position_xy`` and
    ``lookahead_m`` further along it; 0 when the route ends first."""
    nearest = int(np.argmin(np.linalg.norm(route_map - position_xy, axis=1)))
    arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(route_map[nearest:], axis=0), axis=1))])
    ahead = nearest + int(np.searchsorted(arc_m, lookahead_m))
    if ahead + 1 >= len(route_map) or nearest + 1 >= len(route_map):
        return 0.0

    def heading_at(i: int) -> float:
        delta = route_map[i + 1] - route_map[i]
        return float(np.arctan2(delta[1], delta[0]))

    return float(wrap_angle(heading_at(ahead) - heading_at(nearest)))


def navigation_command(scene: Scene, position_xy: np.ndarray, rule: str = DEFAULT_COMMAND_RULE) -> str:
    """The route planner's word (``left`` / ``straight`` / ``right``) for the ego at ``position_xy``."""
    return navigation(scene, position_xy, rule).command


class Navigation(NamedTuple):
    """What the route planner tells the ego: the word, and what its rule adds (None otherwise)."""

    command: str
    distance_m: float | None = None  # ``branch_distance``: along the route to the branch the word is about
    route_ahead_m: np.ndarray | None = None  # ``branch_route``: ``route_ahead``


def navigation(scene: Scene, position_xy: np.ndarray, rule: str = DEFAULT_COMMAND_RULE) -> Navigation:
    """What the route planner tells the ego at ``position_xy`` under ``rule``.

    ``branch`` (and ``branch_distance`` and ``branch_route``, whose word it is): the way the route goes at
    its next branch within 50 m (``roads.RouteBranch``: which of the roads out of that node it takes, against
    the one that continues), held through a turn until the turning lane ends; ``straight`` where no branch is
    near. What CARLA's route options say at junctions. ``branch_distance`` adds how far along the route that
    branch is (0 once the ego is past its node, through the turn; None where no branch is near);
    ``branch_route`` the route's shape ahead (``route_ahead``), everywhere. ``heading`` (the legacy rule):
    ``left`` / ``right`` when the route turns by more than 45 degrees within 50 m; in a roundabout its word
    before an exit depends on how far round the route goes after it (``straight`` before most exits a route
    takes, and before some it passes).

    Raises:
        InputError: an unknown rule.
    """
    if rule == "heading":
        change_rad = route_heading_change(scene.route_map, position_xy, COMMAND_LOOKAHEAD_M)
        if change_rad > TURN_THRESHOLD_RAD:
            return Navigation("left")
        if change_rad < -TURN_THRESHOLD_RAD:
            return Navigation("right")
        return Navigation("straight")
    if rule not in COMMAND_RULES:
        raise InputError(f"navigation command rule must be one of {COMMAND_RULES}, got {rule!r}")
    branch, arc_m = _branch_ahead(scene, position_xy)
    route = route_ahead(scene.route_map, position_xy) if rule == ROUTE_COMMAND_RULE else None
    if branch is None:
        return Navigation("straight", None, route)
    distance_m = max(branch.node_arc_m - arc_m, 0.0) if rule == DISTANCE_COMMAND_RULE else None
    return Navigation(branch.command, distance_m, route)


def _branch_ahead(scene: Scene, position_xy: np.ndarray):
    """The route's branch that sets the command at ``position_xy`` (within the look-ahead, or one whose turn
    is under way), or None; and the position's arc length along the route."""
    route_map = scene.route_map
    nearest = int(np.argmin(np.linalg.norm(route_map - position_xy, axis=1)))
    arc_m = float(np.linalg.norm(np.diff(route_map[: nearest + 1], axis=0), axis=1).sum())
    for branch in scene.route_branches:
        held_until_m = branch.end_arc_m if branch.command != "straight" else branch.node_arc_m
        if arc_m <= held_until_m:
            return (branch if branch.node_arc_m - arc_m <= COMMAND_LOOKAHEAD_M else None), arc_m
    return None, arc_m


def ego_motion(snapshot: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    """Ego velocity of the vehicle centre and acceleration (dv/dt, v * yaw rate) in the ego frame.

    The velocity points along the heading turned by the slip angle, as in the reference's telemetry.
    """
    speed_mps, slip_rad = snapshot.ego.speed_mps, snapshot.ego_slip_rad
    velocity = np.array([speed_mps * np.cos(slip_rad), speed_mps * np.sin(slip_rad)])
    accel = np.array([snapshot.ego_accel_mps2, speed_mps * snapshot.ego_yaw_rate_radps])
    return velocity, accel


def record_drive(scene: Scene, duration_s: float) -> list[Snapshot]:
    """Step ``scene`` for ``duration_s`` and return the snapshots from t = 0, stopping after an ego crash."""
    log = [scene.snapshot()]
    for _ in range(round(duration_s * SIM_HZ)):
        scene.step()
        log.append(scene.snapshot())
        if log[-1].ego_crashed:
            break
    return log


def sample_indices(log: list[Snapshot], stride_ticks: int, first_tick: int = SIM_HZ) -> list[int]:
    """Ticks with a full, crash-free expert horizon after them, every ``stride_ticks`` from ``first_tick``."""
    usable_end = len(log) - HORIZON_TICKS
    if log and log[-1].ego_crashed:
        usable_end -= 1
    return list(range(first_tick, usable_end, stride_ticks))


def expert_waypoints(log: list[Snapshot], index: int) -> np.ndarray:
    """The ego's realised positions (8, 2) at 0.5 .. 4 s after ``index``, in the ego frame at ``index``."""
    ego = log[index].ego
    future = np.array([log[index + k * TICKS_PER_WAYPOINT].ego.xy for k in range(1, NUM_WAYPOINTS + 1)])
    return map_to_ego(future, ego.xy, ego.yaw_rad)


def agent_futures(log: list[Snapshot], index: int) -> AgentFutures:
    """Poses of the vehicles present at ``index`` over the horizon, in the ego frame at ``index``."""
    ego = log[index].ego
    agents = log[index].agents
    poses = np.full((len(agents), NUM_WAYPOINTS + 1, 3), np.nan)
    row = {a.agent_id: i for i, a in enumerate(agents)}
    for k in range(NUM_WAYPOINTS + 1):
        for agent in log[index + k * TICKS_PER_WAYPOINT].agents:
            if agent.agent_id in row:
                xy = map_to_ego(agent.xy, ego.xy, ego.yaw_rad)
                poses[row[agent.agent_id], k] = (xy[0], xy[1], wrap_angle(agent.yaw_rad - ego.yaw_rad))
    sizes = np.array([[a.length_m, a.width_m] for a in agents]).reshape(-1, 2)
    return AgentFutures(poses[:, 1:], poses[:, 0], sizes)


def drivable_polygons(lanes: tuple[LaneGeometry, ...], snapshot: Snapshot) -> tuple[np.ndarray, ...]:
    """Lane polygons (left edge forward, right edge back) in the ego frame, within 150 m of the ego."""
    polygons = []
    for lane in lanes:
        near = np.linalg.norm(lane.centre_map - snapshot.ego.xy, axis=1) < DRIVABLE_RANGE_M
        if near.sum() < 2:
            continue
        index = np.flatnonzero(near)
        keep = slice(max(index[0] - 1, 0), index[-1] + 2)  # one sample beyond the range on both ends
        left, right = (edge[keep] for edge in lane.boundaries(DRIVABLE_MARGIN_M))
        polygon_map = np.concatenate([left, right[::-1]])
        polygons.append(map_to_ego(polygon_map, snapshot.ego.xy, snapshot.ego.yaw_rad))
    return tuple(polygons)


def visible_boxes(frame: Frame) -> np.ndarray:
    """Boxes (M, 4) of vehicles that a labeller would mark: mostly unoccluded, big enough, within 100 m."""
    boxes = [
        b.box_px
        for b in frame.boxes
        if b.visible_fraction >= MIN_VISIBLE_FRACTION
        and b.box_px[3] - b.box_px[1] >= MIN_BOX_HEIGHT_PX
        and b.distance_m <= MAX_BOX_DISTANCE_M
    ]
    return np.array(boxes, dtype=np.float64).reshape(-1, 4)


def _speed_action(log: list[Snapshot], index: int) -> str:
    now_mps = log[index].ego.speed_mps
    later_mps = log[index + HORIZON_TICKS].ego.speed_mps
    if later_mps < 0.5:
        return "stop"
    if later_mps - now_mps < -1.5:
        return "slow down"
    if later_mps - now_mps > 1.5:
        return "accelerate"
    return "keep speed"


def scene_qa(
    log: list[Snapshot], index: int, route_map: np.ndarray, agents: AgentFutures, n_boxes: int
) -> tuple[tuple[str, str], ...]:
    """Question/answer pairs whose answers are facts of the scene (one word or a number)."""
    current = agents.current_ego
    ahead = (current[:, 0] > 0.0) & (current[:, 0] < 30.0) & (np.abs(current[:, 1]) < SAME_LANE_HALF_WIDTH_M)
    curve_rad = route_heading_change(route_map, log[index].ego.xy, CURVE_LOOKAHEAD_M)
    curve = (
        "left"
        if curve_rad > CURVE_THRESHOLD_RAD
        else "right"
        if curve_rad < -CURVE_THRESHOLD_RAD
        else "straight"
    )
    return (
        ("How many vehicles are clearly visible in the image?", str(n_boxes)),
        (
            "Is there a vehicle ahead in the ego lane within 30 meters? Answer yes or no.",
            "yes" if ahead.any() else "no",
        ),
        (
            "What should the ego do in the next 4 seconds: accelerate, keep speed, slow down or stop?",
            _speed_action(log, index),
        ),
        ("Does the road ahead bend left, bend right or go straight?", curve),
    )


def ground_truth(
    log: list[Snapshot], index: int, scene: Scene, frame: Frame, command_rule: str = DEFAULT_COMMAND_RULE
) -> GroundTruth:
    """All ground truth of the sample at tick ``index`` of a drive recorded from ``scene``.

    Args:
        log: the drive from ``record_drive``; ``index`` must be one of ``sample_indices(log, ...)``.
        index: the sample's tick.
        scene: the scene the log came from (lanes and route).
        frame: the front-camera frame rendered at ``index``.
        command_rule: how the route becomes the command (``navigation``).
    """
    snapshot = log[index]
    velocity, accel = ego_motion(snapshot)
    agents = agent_futures(log, index)
    boxes = visible_boxes(frame)
    told = navigation(scene, snapshot.ego.xy, command_rule)
    return GroundTruth(
        command=told.command,
        velocity_ego_mps=velocity,
        accel_ego_mps2=accel,
        waypoints_ego=expert_waypoints(log, index),
        agents=agents,
        drivable_ego=drivable_polygons(scene.lanes, snapshot),
        boxes_px=boxes,
        labels=("car",) * len(boxes),
        qa=scene_qa(log, index, scene.route_map, agents, len(boxes)),
        command_distance_m=told.distance_m,
        route_ahead_m=told.route_ahead_m,
        route_ego_m=route_window_ego(scene.route_map, snapshot.ego.xy, snapshot.ego.yaw_rad),
    )


def _route_lane(network, route: list | None, seat) -> tuple:
    """The lane the expert follows from the seat: the seat's own target lane when it has one, else the route's
    lane nearest in position and heading (junction lanes overlap: the closest lane may be off the route)."""
    if hasattr(seat, "target_lane_index") or not route:
        return getattr(seat, "target_lane_index", seat.lane_index)
    candidates = [(step[0], step[1], step[2] if step[2] is not None else 0) for step in route]
    return min(
        candidates,
        key=lambda index: network.get_lane(index).distance_with_heading(seat.position, seat.heading),
    )


def _remaining_route(route: list | None, lane_index: tuple) -> list | None:
    """The part of ``route`` from the road of ``lane_index`` on (all of it when that road is not on it)."""
    if not route:
        return None
    roads = [step[:2] for step in route]
    return list(route[roads.index(lane_index[:2]) :]) if lane_index[:2] in roads else list(route)


def expert_plan(scene: Scene) -> np.ndarray:
    """The privileged expert's next 8 waypoints (8, 2) in the ego frame, from a rollout on a copy of the road.

    The ego's seat in the copy goes to the scene's IDM/MOBIL expert (same route and desired speed), and
    the copy is stepped for 4 s: the plan is what the data-generating expert would do from here. The live
    scene is not touched.
    """
    # The lane network is immutable: share it instead of copying it. All traffic is copied: MOBIL weighs
    # vehicles far behind in the next lane, so dropping any would change the expert's decisions.
    road = copy.deepcopy(scene.road, memo={id(scene.road.network): scene.road.network})
    index = scene.road.vehicles.index(scene.ego)
    seat = road.vehicles[index]
    lane_index = _route_lane(road.network, scene.expert_route, seat)
    expert = scene.expert_class(
        road,
        seat.position,
        seat.heading,
        seat.speed,
        target_lane_index=lane_index,
        target_speed=scene.expert_target_speed_mps,
        route=_remaining_route(scene.expert_route, lane_index),
        enable_lane_change=scene.expert_lane_change,
        timer=getattr(seat, "timer", None),  # MOBIL's lane-change clock, when the seat has one
    )
    expert.speed_profile = scene.expert_profile
    # The jerk limit continues from the seat's current acceleration (an expert's own, or the controller's).
    expert._accel_mps2 = float(getattr(seat, "_accel_mps2", seat.action.get("acceleration", 0.0)))
    road.vehicles[index] = expert
    start = to_map_xy(expert.position)
    yaw_rad = -float(expert.heading)
    positions = []
    for tick in range(1, HORIZON_TICKS + 1):
        road.act()
        road.step(1.0 / SIM_HZ)
        if tick % TICKS_PER_WAYPOINT == 0:
            positions.append(to_map_xy(expert.position))
    return map_to_ego(np.array(positions), start, yaw_rad)
