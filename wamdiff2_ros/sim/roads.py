"""Road building on highway-env: lane strips, the connectors between lanes, route centrelines and the curvy
multi-lane highway network.

Lanes are highway-env's; everything read out of them is in the map frame of ``scene_types``. The network
builder imports highway-env inside the function, so importing this module does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.geometry import wrap_angle
from wamdiff2_ros.sim.scene_types import LaneGeometry, to_map_xy

LINE_NAMES = {0: "none", 1: "striped", 2: "continuous", 3: "continuous"}  # highway-env LineType values


def lane_edges(lane, s_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Left and right edge points (map frame) of a highway-env lane at arc length ``s_m``."""
    half_m = lane.width_at(s_m) / 2.0
    return to_map_xy(lane.position(s_m, -half_m)), to_map_xy(lane.position(s_m, half_m))


def lane_geometry(lane, step_m: float = 2.0) -> LaneGeometry:
    """A highway-env lane as a ``LaneGeometry`` strip, its edges sampled every ``step_m`` or closer."""
    n = max(2, int(np.ceil(lane.length / step_m)) + 1)
    left, right = zip(*(lane_edges(lane, s) for s in np.linspace(0.0, lane.length, n)), strict=True)
    # highway-env's line_types[0] is the line at lateral -width/2: the left edge.
    return LaneGeometry(
        np.array(left), np.array(right), LINE_NAMES[lane.line_types[0]], LINE_NAMES[lane.line_types[1]]
    )


def lane_connectors(network) -> list[LaneGeometry]:
    """Unpainted strips that bridge each lane's end to the start of the lanes that follow it, where the two do
    not meet (highway-env's roundabout entries and exits leave wedges of grass otherwise)."""
    connectors = []
    for ends in network.graph.values():
        for end_node, lanes in ends.items():
            for lane_id, lane in enumerate(lanes):
                for next_lanes in network.graph.get(end_node, {}).values():
                    following = next_lanes[min(lane_id, len(next_lanes) - 1)]
                    (left_a, right_a), (left_b, right_b) = (
                        lane_edges(lane, lane.length),
                        lane_edges(following, 0.0),
                    )
                    if np.linalg.norm((left_a + right_a - left_b - right_b) / 2) > 0.05:
                        connectors.append(
                            LaneGeometry(
                                np.stack([left_a, left_b]), np.stack([right_a, right_b]), "none", "none"
                            )
                        )
    return connectors


def route_polyline(network, lane_index: tuple, route: list | None, step_m: float = 2.0) -> np.ndarray:
    """The centreline (N, 2) in the map frame from the start of ``lane_index`` along ``route`` to its end.

    Roads are followed in route order, keeping the lane id where the next road has it; without a route the
    network's first continuation is followed until the road ends.
    """
    points, current = [], lane_index
    remaining = list(route or [])[1:]
    for _ in range(200):
        lane = network.get_lane(current)
        points.append(lane_geometry(lane, step_m).centre_map)
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


BRANCH_PROBE_M = 10.0  # how far into a lane its direction is read: about a roundabout segment's length


@dataclass(frozen=True)
class RouteBranch:
    """A point where the route leaves a node that has several lanes out, and which way it goes there.

    ``command`` is ``straight`` for the lane that continues the incoming lane's curvature (the circle of a
    roundabout, the through lane of an intersection) and ``left`` / ``right`` for one that turns off to
    that side of it. ``node_arc_m`` is where the branch is along the route polyline, ``end_arc_m`` where the
    chosen lane ends (a turn is under way until then)."""

    node_arc_m: float
    end_arc_m: float
    command: str


def _map_heading(lane, s_m: float) -> float:
    """The lane's direction at arc length ``s_m`` in the map frame (radians, left positive)."""
    a = min(max(s_m - 0.5, 0.0), lane.length - 1.0)
    delta = to_map_xy(lane.position(a + 1.0, 0.0)) - to_map_xy(lane.position(a, 0.0))
    return float(np.arctan2(delta[1], delta[0]))


def _branch_command(incoming, options: dict, chosen: str, lane_id: int) -> str:
    """``straight``, ``left`` or ``right``: the chosen successor against the one that best continues
    ``incoming`` (its heading ``BRANCH_PROBE_M`` past the node, extrapolated at the incoming curvature)."""
    probe = min(BRANCH_PROBE_M, incoming.length)
    end_heading = _map_heading(incoming, incoming.length)
    turn_rate = float(wrap_angle(end_heading - _map_heading(incoming, incoming.length - probe))) / probe
    deviation = {}
    for node, lanes in options.items():
        lane = lanes[min(lane_id, len(lanes) - 1)]
        expected = end_heading + turn_rate * min(BRANCH_PROBE_M, lane.length)
        deviation[node] = float(wrap_angle(_map_heading(lane, min(BRANCH_PROBE_M, lane.length)) - expected))
    through = min(deviation, key=lambda node: abs(deviation[node]))
    if chosen == through:
        return "straight"
    return "left" if deviation[chosen] > deviation[through] else "right"


def _nearest_from(route_map: np.ndarray, first: int, position_hw: np.ndarray) -> int:
    """The index of the polyline point nearest a highway-env position, from index ``first`` on."""
    return first + int(np.argmin(np.linalg.norm(route_map[first:] - to_map_xy(position_hw), axis=1)))


def route_branches(
    network, lane_index: tuple, route: list | None, route_map: np.ndarray
) -> tuple[RouteBranch, ...]:
    """The branches along ``route`` from ``lane_index`` (as ``route_polyline`` follows it), placed on its
    polyline ``route_map``: every node the route leaves where the network offers more than one road."""
    arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(route_map, axis=0), axis=1))])
    branches, current, searched_from = [], lane_index, 0
    for next_from, next_to, next_id in list(route or [])[1:]:
        incoming = network.get_lane(current)
        lanes = network.graph[next_from][next_to]
        lane_id = next_id if next_id is not None else min(current[2], len(lanes) - 1)
        chosen = network.get_lane((next_from, next_to, lane_id))
        options = network.graph[next_from]
        if len(options) > 1:
            # the polyline points where the chosen lane starts and ends, searched forward along the route
            start = _nearest_from(route_map, searched_from, chosen.position(0.0, 0.0))
            end = _nearest_from(route_map, start, chosen.position(chosen.length, 0.0))
            command = _branch_command(incoming, options, next_to, current[2])
            branches.append(RouteBranch(float(arc_m[start]), float(arc_m[end]), command))
            searched_from = start
        current = (next_from, next_to, lane_id)
    return tuple(branches)


def curvy_network(rng: np.random.Generator, n_lanes: int, speed_limit_mps: float):
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


def lane_at(net, lane_id: int, s_m: float):
    """The lane with id ``lane_id`` that holds arc length ``s_m`` from the road's start, and the local s."""
    node = 0
    while True:
        lane = net.get_lane((f"n{node}", f"n{node + 1}", lane_id))
        if s_m <= lane.length or f"n{node + 2}" not in net.graph.get(f"n{node + 1}", {}):
            return lane, min(s_m, lane.length)
        s_m -= lane.length
        node += 1
