"""Driving scenes on highway-env: road networks and IDM/MOBIL traffic, varied by seed, stepped at 10 Hz.

highway-env supplies lanes, vehicles and their behaviour; this module builds scenes from them and reads the
state out in a right-handed map frame (x east, y north, yaw counter-clockwise). highway-env draws y downwards,
so every position has its y negated and every heading its sign flipped, as the CARLA ROS bridge does for
Unreal's left-handed frame. Rendering, ground truth and control live in the sibling modules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import wrap_angle

SIM_HZ = 10
SIM_DT_S = 1.0 / SIM_HZ
SCENE_KINDS = ("highway", "intersection", "roundabout")
SCENE_KIND_WEIGHTS = (0.5, 0.3, 0.2)  # how often a seed draws each kind
CAR_HEIGHT_M = 1.5
CULL_RADIUS_M = 200.0
LINE_NAMES = {0: "none", 1: "striped", 2: "continuous", 3: "continuous"}  # highway-env LineType values


def import_highway_env():
    """Import highway-env lazily (an optional heavy dependency) and keep pygame off any display."""
    # 'offscreen', not 'dummy': highway-env 1.12.1 disables its viewer under 'dummy' (feasibility_ml.md §4).
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
    try:
        import highway_env
    except ImportError as exc:
        raise ImportError(
            "the driving simulator needs highway-env: pip install -r requirements/base.txt"
        ) from exc
    return highway_env


@dataclass(frozen=True)
class AgentState:
    """One vehicle in the map frame."""

    agent_id: int
    x_m: float
    y_m: float
    yaw_rad: float
    speed_mps: float
    length_m: float
    width_m: float
    height_m: float = CAR_HEIGHT_M

    @property
    def xy(self) -> np.ndarray:
        return np.array([self.x_m, self.y_m])


@dataclass(frozen=True)
class Snapshot:
    """The scene at one tick: ego, its motion derivatives, the other vehicles and the ego's infractions."""

    time_s: float
    ego: AgentState
    ego_accel_mps2: float  # rate of change of speed over the last tick
    ego_yaw_rate_radps: float
    ego_slip_rad: float  # angle of the centre's velocity from the heading (kinematic bicycle), left positive
    agents: tuple[AgentState, ...]
    ego_crashed: bool
    ego_on_road: bool


@dataclass(frozen=True)
class LaneGeometry:
    """A strip of road surface: its left and right edges sampled in the map frame and each edge's paint."""

    left_map: np.ndarray  # (N, 2) metres, in driving order
    right_map: np.ndarray  # (N, 2)
    left_line: str  # none | striped | continuous
    right_line: str

    @property
    def centre_map(self) -> np.ndarray:
        """The centreline (N, 2)."""
        return (self.left_map + self.right_map) / 2.0

    def boundaries(self, margin_m: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Left and right edges (N, 2), each moved outwards by ``margin_m``."""
        across = self.left_map - self.right_map
        outward = margin_m * across / np.maximum(np.linalg.norm(across, axis=1, keepdims=True), 1e-9)
        return self.left_map + outward, self.right_map - outward


def to_map_xy(position_hw: np.ndarray) -> np.ndarray:
    """A highway-env position (y down) in the right-handed map frame."""
    return np.array([position_hw[0], -position_hw[1]], dtype=np.float64)


def _edges(lane, s_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Left and right edge points (map frame) of a highway-env lane at arc length ``s_m``."""
    half_m = lane.width_at(s_m) / 2.0
    return to_map_xy(lane.position(s_m, -half_m)), to_map_xy(lane.position(s_m, half_m))


def _lane_geometry(lane, step_m: float = 2.0) -> LaneGeometry:
    n = max(2, int(np.ceil(lane.length / step_m)) + 1)
    left, right = zip(*(_edges(lane, s) for s in np.linspace(0.0, lane.length, n)), strict=True)
    # highway-env's line_types[0] is the line at lateral -width/2: the left edge.
    return LaneGeometry(
        np.array(left), np.array(right), LINE_NAMES[lane.line_types[0]], LINE_NAMES[lane.line_types[1]]
    )


def _lane_connectors(network) -> list[LaneGeometry]:
    """Unpainted strips that bridge each lane's end to the start of the lanes that follow it, where the two do
    not meet (highway-env's roundabout entries and exits leave wedges of grass otherwise)."""
    connectors = []
    for ends in network.graph.values():
        for end_node, lanes in ends.items():
            for lane_id, lane in enumerate(lanes):
                for next_lanes in network.graph.get(end_node, {}).values():
                    following = next_lanes[min(lane_id, len(next_lanes) - 1)]
                    (left_a, right_a), (left_b, right_b) = _edges(lane, lane.length), _edges(following, 0.0)
                    if np.linalg.norm((left_a + right_a - left_b - right_b) / 2) > 0.05:
                        connectors.append(
                            LaneGeometry(
                                np.stack([left_a, left_b]), np.stack([right_a, right_b]), "none", "none"
                            )
                        )
    return connectors


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
        lanes = [_lane_geometry(lane) for lane in self.road.network.lanes_list()]
        self.lanes = tuple(lanes + _lane_connectors(self.road.network))
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


def route_polyline(network, lane_index: tuple, route: list | None, step_m: float = 2.0) -> np.ndarray:
    """The centreline (N, 2) in the map frame from the start of ``lane_index`` along ``route`` to its end.

    Roads are followed in route order, keeping the lane id where the next road has it; without a route the
    network's first continuation is followed until the road ends.
    """
    points, current = [], lane_index
    remaining = list(route or [])[1:]
    for _ in range(200):
        lane = network.get_lane(current)
        points.append(_lane_geometry(lane, step_m).centre_map)
        _, end_node, lane_id = current
        if remaining:
            next_from, next_to, next_id = remaining.pop(0)
        elif route is None and network.graph.get(end_node):
            next_from, next_to, next_id = end_node, next(iter(network.graph[end_node])), None
        else:
            break
        lanes = network.graph[next_from][next_to]
        current = (next_from, next_to, next_id if next_id is not None else min(lane_id, len(lanes) - 1))
    polyline = np.concatenate(points)
    # A lane starts where the previous one ends: drop the repeated joints so every segment has a direction.
    keep = np.concatenate([[True], np.linalg.norm(np.diff(polyline, axis=0), axis=1) > 1e-6])
    return polyline[keep]


def _curvy_network(rng: np.random.Generator, n_lanes: int, speed_limit_mps: float):
    """A multi-lane one-way road of straight and arc segments, about 1.2 km long."""
    from highway_env.road.lane import CircularLane, LineType, StraightLane
    from highway_env.road.road import RoadNetwork

    width_m = StraightLane.DEFAULT_WIDTH
    net = RoadNetwork()
    position, heading = np.zeros(2), 0.0  # highway-env frame (y down): heading grows clockwise on screen
    c, s, n = LineType.CONTINUOUS, LineType.STRIPED, LineType.NONE
    line_types = [[c if i == 0 else n, c if i == n_lanes - 1 else s] for i in range(n_lanes)]
    total_m, node = 0.0, 0
    while total_m < 1200.0:
        normal = np.array([-np.sin(heading), np.cos(heading)])  # lateral +: right of the driving direction
        shape = rng.choice(["straight", "left", "right"], p=[0.4, 0.3, 0.3]) if node > 0 else "straight"
        if shape == "straight":
            length_m = float(rng.uniform(80.0, 200.0))
            direction = np.array([np.cos(heading), np.sin(heading)])
            lanes = [
                StraightLane(
                    position + i * width_m * normal,
                    position + i * width_m * normal + length_m * direction,
                    line_types=line_types[i],
                    speed_limit=speed_limit_mps,
                )
                for i in range(n_lanes)
            ]
            position, end_heading = position + length_m * direction, heading
        else:
            radius_m = float(rng.uniform(120.0, 300.0))
            angle_rad = float(rng.uniform(0.3, 0.9))
            sign = 1.0 if shape == "right" else -1.0
            centre = position + sign * radius_m * normal
            phase0 = heading - sign * np.pi / 2
            lanes = [
                CircularLane(
                    centre,
                    radius_m - sign * i * width_m,
                    phase0,
                    phase0 + sign * angle_rad,
                    clockwise=shape == "right",
                    line_types=line_types[i],
                    speed_limit=speed_limit_mps,
                )
                for i in range(n_lanes)
            ]
            end_heading = heading + sign * angle_rad
            position = lanes[0].position(lanes[0].length, 0.0)
            length_m = radius_m * angle_rad
        for lane in lanes:
            net.add_lane(f"n{node}", f"n{node + 1}", lane)
        heading, total_m, node = end_heading, total_m + length_m, node + 1
    return net


def _make_highway(seed: int, rng: np.random.Generator) -> Scene:
    from highway_env.road.road import Road
    from highway_env.vehicle.kinematics import Vehicle

    from wamdiff2_ros.sim.drivers import ExpertDriver, Traffic

    n_lanes = int(rng.integers(1, 5))
    speed_limit_mps = float(rng.uniform(18.0, 30.0))
    net = _curvy_network(rng, n_lanes, speed_limit_mps)
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
                lane, lane_s_m = _lane_at(net, lane_id, s_m)
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
    event_kind = str(rng.choice(["none", "braking_lead", "stopped_obstacle"], p=[0.5, 0.25, 0.25]))
    if event_kind != "none":
        lead_s_m = ego_s_m + (35.0 if event_kind == "braking_lead" else float(rng.uniform(90.0, 160.0)))
        lane, lane_s_m = _lane_at(net, ego_lane_id, lead_s_m)
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


def _lane_at(net, lane_id: int, s_m: float):
    """The lane with id ``lane_id`` that holds arc length ``s_m`` from the road's start, and the local s."""
    node = 0
    while True:
        lane = net.get_lane((f"n{node}", f"n{node + 1}", lane_id))
        if s_m <= lane.length or f"n{node + 2}" not in net.graph.get(f"n{node + 1}", {}):
            return lane, min(s_m, lane.length)
        s_m -= lane.length
        node += 1


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
    return Scene(kind, seed, road, ego, route, facts)


def make_scene(seed: int, kind: str | None = None) -> Scene:
    """Build a scene deterministically from ``seed``; ``kind`` defaults to one drawn from the seed.

    Args:
        seed: any non-negative integer; the same seed always gives the same scene and the same traffic.
        kind: one of ``SCENE_KINDS`` or None.

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
    return _make_highway(seed, rng) if kind == "highway" else _make_junction(kind, seed, rng)
