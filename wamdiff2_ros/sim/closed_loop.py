"""The closed loop: a policy plans from what the car senses, a controller drives the simulated ego.

Each episode takes a seeded scene, hands the ego's seat to a kinematic vehicle, and ticks at 10 Hz: every
``1 / plan_hz`` seconds the policy gets an ``Observation`` and returns 8 ego-frame waypoints, and the
controller turns the latest plan into steering and acceleration. The episode ends when the route is done,
on a collision, on leaving the route, or at the time limit. Scoring (the driving score) is ``eval``'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.plan_frame import route_window_ego
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS
from wamdiff2_ros.sim.controller import TrajectoryController
from wamdiff2_ros.sim.engine import SIM_HZ
from wamdiff2_ros.sim.expert import ego_motion, navigation
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scene_types import Snapshot
from wamdiff2_ros.sim.scenes import Scene, make_scene

ROUTE_DEVIATION_M = 15.0  # farther than this from the route centreline ends the episode (CARLA-style)
STANDSTILL_MPS = 0.5  # slower than this counts as standing still (a stall, if it lasts)


@dataclass(frozen=True)
class Observation:
    """What a policy may use: the front image (None when the policy does not ask for it) and telemetry."""

    image_rgb: np.ndarray | None
    velocity_ego_mps: np.ndarray  # (2,)
    accel_ego_mps2: np.ndarray  # (2,)
    command: str  # left | straight | right
    time_s: float
    command_distance_m: float | None = None  # to the command's branch, for a policy whose rule gives one
    route_ahead_m: np.ndarray | None = None  # the route's shape ahead, for a policy whose rule gives it
    route_ego_m: np.ndarray | None = None  # the route around the ego in its frame (``route_window_ego``)


class Policy(Protocol):
    """Maps an observation to 8 waypoints (8, 2) in the ego frame at 0.5 s spacing.

    ``needs_image`` tells the loop whether to render the camera for it (rendering costs time);
    ``command_rule`` which navigation command it reads (``model.prompt.COMMAND_RULES``: a model reads the
    rule of its training data, a baseline ignores the command).
    """

    needs_image: bool
    command_rule: str

    def __call__(self, observation: Observation) -> np.ndarray: ...


# A factory sees the live scene so that privileged policies (the expert) can read the simulator; a policy
# that drives from sensors (constant velocity, the model) ignores it.
PolicyFactory = Callable[[Scene], Policy]


@dataclass(frozen=True)
class ClosedLoopConfig:
    """Episode settings.

    Attributes:
        route_length_m: distance along the route that completes it (shorter if the route is shorter).
        max_duration_s: time limit.
        plan_hz: how often the policy is asked for a new plan.
        camera: the camera for policies that need images.
    """

    route_length_m: float = 120.0
    max_duration_s: float = 40.0
    plan_hz: float = 2.0
    camera: Camera = field(default_factory=lambda: Camera().scaled_to_width(640))


@dataclass(frozen=True)
class EpisodeResult:
    """What happened in one episode."""

    seed: int
    kind: str
    route_completion: float  # 0..1
    collisions: int
    off_road_events: int
    end_reason: str  # completed | collision | route_deviation | timeout
    duration_s: float
    ego_path_map: np.ndarray  # (T, 2)
    # The vehicle nearest the ego at a collision: its heading relative to the ego's, degrees in [0, 180]
    # (0: same direction, ~90: crossing, 180: oncoming); None without a collision.
    collision_heading_deg: float | None = None
    standstill_s: float = 0.0  # the longest time the ego stood still (below STANDSTILL_MPS) in one go


class _RouteProgress:
    """Progress of the ego along the route polyline, never decreasing."""

    def __init__(self, route_map: np.ndarray, start_xy: np.ndarray, length_m: float):
        self.route_map = route_map
        self.arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(route_map, axis=0), axis=1))])
        self.start_m = self._project(start_xy)[0]
        self.length_m = min(length_m, self.arc_m[-1] - self.start_m - 10.0)
        self.best_m = 0.0

    def _project(self, xy: np.ndarray) -> tuple[float, float]:
        """Arc length of the nearest route point and the distance to it."""
        distances = np.linalg.norm(self.route_map - xy, axis=1)
        nearest = int(np.argmin(distances))
        return float(self.arc_m[nearest]), float(distances[nearest])

    def update(self, xy: np.ndarray) -> float:
        """Record the ego at ``xy``; returns its distance from the route."""
        arc_m, offset_m = self._project(xy)
        self.best_m = max(self.best_m, arc_m - self.start_m)
        return offset_m

    @property
    def completion(self) -> float:
        return float(np.clip(self.best_m / self.length_m, 0.0, 1.0)) if self.length_m > 0 else 1.0


def _kinematic_ego(scene: Scene):
    """Replace the scene's IDM ego by a plain kinematic vehicle in the same state, driven by actions."""
    from highway_env.vehicle.kinematics import Vehicle

    ego = Vehicle(scene.road, scene.ego.position.copy(), scene.ego.heading, scene.ego.speed)
    ego.action = {"steering": 0.0, "acceleration": 0.0}
    scene.replace_ego(ego)
    return ego


def _observe(scene: Scene, snapshot: Snapshot, policy: Policy, camera: Camera) -> Observation:
    velocity, accel = ego_motion(snapshot)
    image = render_front(camera, scene.lanes, snapshot).image_rgb if policy.needs_image else None
    told = navigation(scene, snapshot.ego.xy, policy.command_rule)
    route_ego = route_window_ego(scene.route_map, snapshot.ego.xy, snapshot.ego.yaw_rad)
    return Observation(
        image, velocity, accel, told.command, snapshot.time_s, told.distance_m, told.route_ahead_m, route_ego
    )


def run_episode(
    seed: int,
    policy_factory: PolicyFactory,
    config: ClosedLoopConfig,
    kind: str | None = None,
    observer: Callable[[Scene, Snapshot, int], None] | None = None,
    highway_events_only: bool = False,
) -> EpisodeResult:
    """Drive one seeded scene with the policy in the loop.

    Args:
        seed: scene seed (``make_scene``).
        policy_factory: builds the policy for this scene.
        config: route length, time limit, planning rate, camera.
        kind: scene kind, or None to draw it from the seed.
        observer: called at every tick with the live scene, its snapshot and the tick, before the policy
            plans and the scene steps (``sim.dagger`` records the expert's labels of the states reached).
        highway_events_only: a highway scene has a braking or stopped car ahead (``make_scene``; DAgger
            data, not an evaluation's scene distribution).

    Raises:
        InputError: the policy returns something other than a finite (8, 2) array.
    """
    scene = make_scene(seed, kind, highway_events_only)
    policy = policy_factory(scene)  # before the seat changes hands: the expert reads the IDM driver's route
    ego = _kinematic_ego(scene)
    controller = TrajectoryController()
    progress = _RouteProgress(scene.route_map, scene.snapshot().ego.xy, config.route_length_m)
    ticks_per_plan = max(1, round(SIM_HZ / config.plan_hz))
    collisions = off_road_events = 0
    end_reason, was_on_road = "timeout", True
    path, crash_heading_deg = [], None
    standstill_s = still_s = 0.0
    for tick in range(round(config.max_duration_s * SIM_HZ)):
        snapshot = scene.snapshot()
        if observer is not None:
            observer(scene, snapshot, tick)
        path.append(snapshot.ego.xy)
        still_s = still_s + 1.0 / SIM_HZ if snapshot.ego.speed_mps < STANDSTILL_MPS else 0.0
        standstill_s = max(standstill_s, still_s)
        if tick % ticks_per_plan == 0:
            plan = np.asarray(policy(_observe(scene, snapshot, policy, config.camera)), dtype=np.float64)
            if plan.shape != (NUM_WAYPOINTS, 2) or not np.isfinite(plan).all():
                raise InputError(
                    f"policy must return a finite ({NUM_WAYPOINTS}, 2) array, got shape {plan.shape}"
                )
            controller.set_plan(plan, snapshot.ego, snapshot.time_s)
        steering_rad, accel_mps2 = controller.control(snapshot.ego, snapshot.time_s)
        ego.action = {
            "steering": -steering_rad,
            "acceleration": accel_mps2,
        }  # highway-env turns the other way
        scene.step()
        after = scene.snapshot()
        if not after.ego_on_road and was_on_road:
            off_road_events += 1
        was_on_road = after.ego_on_road
        if progress.update(after.ego.xy) > ROUTE_DEVIATION_M:
            end_reason = "route_deviation"
            break
        if after.ego_crashed:
            collisions, end_reason = 1, "collision"  # highway-env stops crashed vehicles: the episode ends
            crash_heading_deg = _nearest_relative_heading_deg(after)
            break
        if progress.completion >= 1.0:
            end_reason = "completed"
            break
    return EpisodeResult(
        seed,
        scene.kind,
        progress.completion,
        collisions,
        off_road_events,
        end_reason,
        scene.time_s,
        np.array(path),
        crash_heading_deg,
        standstill_s,
    )


def _nearest_relative_heading_deg(snapshot: Snapshot) -> float | None:
    """Heading of the vehicle nearest the ego relative to the ego's, in [0, 180] degrees (None: no other)."""
    if not snapshot.agents:
        return None
    nearest = min(snapshot.agents, key=lambda a: float(np.linalg.norm(a.xy - snapshot.ego.xy)))
    difference = (nearest.yaw_rad - snapshot.ego.yaw_rad + np.pi) % (2 * np.pi) - np.pi
    return abs(float(np.degrees(difference)))
