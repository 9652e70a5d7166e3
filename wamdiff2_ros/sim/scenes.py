"""Driving scenes on highway-env: roads, IDM/MOBIL traffic and events, varied by seed, stepped at 10 Hz.

highway-env supplies lanes, vehicles and their behaviour; this module builds scenes from them (a curvy
highway, an intersection, a roundabout) and reads the state out as ``scene_types`` values in the map frame.
Roads are built in ``roads``, the drivers are ``drivers``' (imported lazily: importing them imports
highway-env); rendering, ground truth and control live in the other sibling modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import wrap_angle
from wamdiff2_ros.sim.engine import SIM_DT_S, SIM_HZ, import_highway_env
from wamdiff2_ros.sim.roads import (
    RouteBranch,
    curvy_network,
    lane_at,
    lane_connectors,
    lane_geometry,
    route_branches,
    route_polyline,
)
from wamdiff2_ros.sim.scene_types import AgentState, LaneGeometry, Snapshot, to_map_xy

SCENE_KINDS = ("highway", "intersection", "roundabout")
SCENE_KIND_WEIGHTS = (0.5, 0.3, 0.2)  # how often a seed draws each kind
CULL_RADIUS_M = 200.0


@dataclass
class SpeedEvent:
    """At ``time_s`` the vehicle's desired speed becomes ``target_speed_mps`` (a braking lead car)."""

    time_s: float
    vehicle: object
    target_speed_mps: float


@dataclass
class Scene:
    """A live highway-env road with a designated ego vehicle; ``step`` advances it by one 10 Hz tick."""

    kind: str
    seed: int
    road: object  # highway_env.road.road.Road
    ego: object  # highway_env.vehicle.kinematics.Vehicle
    route_map: np.ndarray  # (N, 2) centreline the ego should follow to its goal, map frame
    facts: dict
    events: list[SpeedEvent] = field(default_factory=list)
    route_branches: tuple[RouteBranch, ...] = ()  # where the route chooses among roads (a highway has none)
    time_s: float = 0.0
    lanes: tuple[LaneGeometry, ...] = ()
    _last_speed_mps: float = 0.0
    _last_yaw_rad: float = 0.0
    # id(vehicle) -> (stable agent id, vehicle); holding the vehicle keeps its id() from being reused
    _agent_ids: dict = field(default_factory=dict)
    expert_route: list | None = None  # the IDM expert's route and desired speed, kept for expert re-plans
    expert_target_speed_mps: float = 0.0
    expert_profile: object = None  # drivers.CurveSpeedProfile of the route
    expert_lane_change: bool = True
    expert_class: type | None = None  # drivers.ExpertDriver or a subclass

    def agent_id(self, vehicle) -> int:
        """A stable id for ``vehicle`` (0 is the ego) that survives removal of other vehicles."""
        if vehicle is self.ego:
            return 0
        key = id(vehicle)
        if key not in self._agent_ids:
            self._agent_ids[key] = (len(self._agent_ids) + 1, vehicle)
        return self._agent_ids[key][0]

    def __post_init__(self) -> None:
        lanes = [lane_geometry(lane) for lane in self.road.network.lanes_list()]
        self.lanes = tuple(lanes + lane_connectors(self.road.network))
        self.expert_route = list(self.ego.route) if self.ego.route else None
        self.expert_target_speed_mps = float(self.ego.target_speed)
        self.expert_lane_change = bool(self.ego.enable_lane_change)
        self.expert_class = type(self.ego)
        from wamdiff2_ros.sim.drivers import CurveSpeedProfile  # imports highway-env, so not at module level

        self.expert_profile = CurveSpeedProfile(self.route_map)
        self.ego.speed_profile = self.expert_profile
        self._last_speed_mps, self._last_yaw_rad = float(self.ego.speed), -float(self.ego.heading)
        for vehicle in self._others():
            self.agent_id(vehicle)

    def stand_still(self) -> None:
        """Put the ego at rest where it is (before the first step): a standing start."""
        self.ego.speed = 0.0
        self._last_speed_mps = 0.0

    def step(self) -> None:
        """Advance one tick: scheduled speed changes, then every driver acts and the dynamics integrate."""
        self._last_speed_mps, self._last_yaw_rad = float(self.ego.speed), -float(self.ego.heading)
        for event in self.events:
            if abs(event.time_s - self.time_s) < SIM_DT_S / 2:
                event.vehicle.target_speed = event.target_speed_mps
        # Traffic far from the ego cannot affect it within a planning horizon; dropping it keeps ticks cheap.
        self.road.vehicles = [
            v
            for v in self.road.vehicles
            if v is self.ego or np.linalg.norm(v.position - self.ego.position) < CULL_RADIUS_M
        ]
        self.road.act()
        self.road.step(SIM_DT_S)
        self.time_s = round(self.time_s + SIM_DT_S, 6)

    def snapshot(self) -> Snapshot:
        """The current state, in the map frame."""
        ego_yaw_rad = -float(self.ego.heading)
        yaw_change_rad = float(wrap_angle(ego_yaw_rad - self._last_yaw_rad))
        return Snapshot(
            time_s=self.time_s,
            ego=_agent_state(self.ego, 0),
            ego_accel_mps2=(float(self.ego.speed) - self._last_speed_mps) / SIM_DT_S,
            ego_yaw_rate_radps=yaw_change_rad / SIM_DT_S,
            # highway-env: beta = atan(tan(delta) / 2), with its steering sign flipped into the map frame.
            ego_slip_rad=-float(np.arctan(np.tan(self.ego.action.get("steering", 0.0)) / 2.0)),
            agents=tuple(_agent_state(v, self.agent_id(v)) for v in self._others()),
            ego_crashed=bool(self.ego.crashed),
            ego_on_road=bool(self.ego.on_road),
        )

    def _others(self) -> list:
        return [v for v in self.road.vehicles if v is not self.ego]

    def replace_ego(self, vehicle) -> None:
        """Put ``vehicle`` (same state, another driver) in place of the ego, keeping the agents' order."""
        self.road.vehicles[self.road.vehicles.index(self.ego)] = vehicle
        self.ego = vehicle


def _agent_state(vehicle, agent_id: int) -> AgentState:
    xy = to_map_xy(vehicle.position)
    return AgentState(
        agent_id,
        float(xy[0]),
        float(xy[1]),
        -float(vehicle.heading),
        float(vehicle.speed),
        vehicle.LENGTH,
        vehicle.WIDTH,
    )


HIGHWAY_EVENTS = ("none", "braking_lead", "stopped_obstacle")
HIGHWAY_EVENT_WEIGHTS = (0.5, 0.25, 0.25)


def _make_highway(seed: int, rng: np.random.Generator, events_only: bool = False) -> Scene:
    from highway_env.road.road import Road
    from highway_env.vehicle.kinematics import Vehicle

    from wamdiff2_ros.sim.drivers import ExpertDriver, Traffic

    n_lanes = int(rng.integers(1, 5))
    speed_limit_mps = float(rng.uniform(18.0, 30.0))
    net = curvy_network(rng, n_lanes, speed_limit_mps)
    # Connected-lane neighbours: otherwise IDM drivers do not see a leader on the next road segment.
    road = Road(network=net, np_random=np.random.RandomState(seed), neighbour_vehicles_connected_lanes=True)
    ego_lane_id = int(rng.integers(0, n_lanes))
    first_lane = net.get_lane(("n0", "n1", ego_lane_id))
    ego_s_m = 30.0
    ego = ExpertDriver(
        road,
        first_lane.position(ego_s_m, 0.0),
        first_lane.heading_at(ego_s_m),
        speed=speed_limit_mps * float(rng.uniform(0.6, 0.9)),
        target_speed=speed_limit_mps,
    )
    road.vehicles.append(ego)
    density = str(rng.choice(["empty", "light", "dense"], p=[0.2, 0.5, 0.3]))
    spacing_m = {"empty": 1e9, "light": 60.0, "dense": 30.0}[density]
    for lane_id in range(n_lanes):
        s_m = float(rng.uniform(0.0, spacing_m)) if spacing_m < 1e8 else 1e9
        while s_m < 300.0:
            if abs(s_m - ego_s_m) > 15.0 or lane_id != ego_lane_id:
                lane, lane_s_m = lane_at(net, lane_id, s_m)
                other = Traffic(
                    road,
                    lane.position(lane_s_m, 0.0),
                    lane.heading_at(lane_s_m),
                    speed=speed_limit_mps * float(rng.uniform(0.5, 0.8)),
                    target_speed=speed_limit_mps * float(rng.uniform(0.6, 0.95)),
                )
                other.randomize_behavior()
                road.vehicles.append(other)
            s_m += spacing_m * float(rng.uniform(0.7, 1.5))
    events: list[SpeedEvent] = []
    event_kind = str(rng.choice(HIGHWAY_EVENTS, p=HIGHWAY_EVENT_WEIGHTS))
    if events_only and event_kind == "none":  # a draw of its own: the scene's other draws stay as they were
        event_kind = str(np.random.default_rng([seed, 2]).choice(HIGHWAY_EVENTS[1:]))
    if event_kind != "none":
        lead_s_m = ego_s_m + (35.0 if event_kind == "braking_lead" else float(rng.uniform(90.0, 160.0)))
        lane, lane_s_m = lane_at(net, ego_lane_id, lead_s_m)
        road.vehicles = [
            v for v in road.vehicles if np.linalg.norm(v.position - lane.position(lane_s_m, 0)) > 12.0
        ]
        if event_kind == "stopped_obstacle":
            # A plain kinematic vehicle with zero speed and no action stays put (an IDM driver would creep).
            lead = Vehicle(road, lane.position(lane_s_m, 0.0), lane.heading_at(lane_s_m), speed=0.0)
        else:
            lead = Traffic(
                road,
                lane.position(lane_s_m, 0.0),
                lane.heading_at(lane_s_m),
                speed=ego.speed,
                target_speed=speed_limit_mps,
                enable_lane_change=False,
            )
            # IDM with a desired speed of 0 oscillates about zero, so the braking target stays above 1 m/s.
            events.append(
                SpeedEvent(round(float(rng.uniform(1.0, 4.0)), 1), lead, float(rng.uniform(1.0, 6.0)))
            )
        road.vehicles.append(lead)
    facts = {
        "kind": "highway",
        "n_lanes": n_lanes,
        "ego_lane_from_left": ego_lane_id + 1,
        "density": density,
        "event": event_kind,
        "speed_limit_mps": speed_limit_mps,
    }
    route = route_polyline(net, ("n0", "n1", ego_lane_id), None)
    return Scene("highway", seed, road, ego, route, facts, events)


@dataclass(frozen=True)
class _JunctionEnv:
    """A highway-env junction environment used only for its road and initial traffic."""

    env_class: str  # import path
    traffic_class: str  # our Traffic subclass for its vehicles (the env may set class-wide IDM constants)
    destinations: tuple[str, ...]  # exit nodes the ego may be routed to
    extra_config: dict


JUNCTIONS = {
    "intersection": _JunctionEnv(
        "highway_env.envs.intersection_env.IntersectionEnv",
        "wamdiff2_ros.sim.drivers.JunctionTraffic",
        ("o1", "o2", "o3"),
        {"spawn_probability": 0.0},
    ),
    "roundabout": _JunctionEnv(
        "highway_env.envs.roundabout_env.RoundaboutEnv",
        "wamdiff2_ros.sim.drivers.RoundaboutTraffic",
        ("exr", "nxr", "wxr"),
        {},
    ),
}


def _make_junction(kind: str, seed: int, rng: np.random.Generator) -> Scene:
    """A junction scene: highway-env builds the road and traffic; the expert takes the ego's seat."""
    from highway_env import utils

    from wamdiff2_ros.sim.drivers import JunctionExpert

    spec = JUNCTIONS[kind]
    destination = str(rng.choice(spec.destinations))
    config = {"simulation_frequency": SIM_HZ, "other_vehicles_type": spec.traffic_class, **spec.extra_config}
    if kind == "intersection":
        config["initial_vehicle_count"] = int(rng.integers(1, 9))
    env = utils.class_from_path(spec.env_class)(config=config)
    env.reset(seed=seed)
    road = env.unwrapped.road
    road.neighbour_vehicles_connected_lanes = True
    mdp_ego = env.unwrapped.vehicle
    ego = JunctionExpert.create_from(mdp_ego)
    ego.enable_lane_change = False  # in junctions the expert keeps to its route's lane
    ego.plan_route_to(destination)
    ego.target_speed = mdp_ego.lane.speed_limit
    road.vehicles[road.vehicles.index(mdp_ego)] = ego
    env.close()
    facts = {
        "kind": kind,
        "n_lanes": 1,
        "ego_lane_from_left": 1,
        "density": f"{len(road.vehicles) - 1} vehicles",
        "event": f"exit {destination}",
        "speed_limit_mps": float(mdp_ego.lane.speed_limit),
    }
    route = route_polyline(road.network, ego.lane_index, ego.route)
    branches = route_branches(road.network, ego.lane_index, ego.route, route)
    return Scene(kind, seed, road, ego, route, facts, route_branches=branches)


def make_scene(seed: int, kind: str | None = None, highway_events_only: bool = False) -> Scene:
    """Build a scene deterministically from ``seed``; ``kind`` defaults to one drawn from the seed.

    Args:
        seed: any non-negative integer; the same seed always gives the same scene and the same traffic.
        kind: one of ``SCENE_KINDS`` or None.
        highway_events_only: a highway scene always has an event ahead of the ego (a lead car that brakes
            hard, or a stopped car), where it has one in two otherwise: training data for what the ego
            rarely meets, not a scene distribution to evaluate on.

    Raises:
        InputError: unknown kind or a negative seed.
    """
    if seed < 0:
        raise InputError(f"seed must be non-negative, got {seed}")
    import_highway_env()
    rng = np.random.default_rng(seed)
    kind = kind or str(rng.choice(SCENE_KINDS, p=SCENE_KIND_WEIGHTS))
    if kind not in SCENE_KINDS:
        raise InputError(f"scene kind must be one of {SCENE_KINDS}, got {kind!r}")
    if kind == "highway":
        return _make_highway(seed, rng, highway_events_only)
    return _make_junction(kind, seed, rng)
