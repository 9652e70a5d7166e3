"""Where a planning answer's numbers are: the ego's frame, or along the route.

``ego``: x forward, y left of the car now (the reference's answer). ``route``: each waypoint as (s, d), s
metres along the route from the car's place on it and d metres to the left of the route's centreline
(``route_frame.RouteFrame``); ``route_offset``: d to the left of the car's present offset from the
centreline instead, normal to the route. On a straight road with the car on the centreline the three are
the same numbers; where the road turns, d = 0 turns with it, so the model writes the speed profile and its
lateral moves (a lane change, a return to the lane) and the route gives the turn (docs/DECISIONS.md, "plans
written along the route"). With ``route`` a plan that says nothing of its lateral (d = 0) returns to the
route's lane; with ``route_offset`` it keeps the car's offset. A model's config.json names its frame under
``PLAN_FRAME_KEY`` (absent: ``ego``); a data folder's ``navigation.json`` names its answers'.

The route comes as its polyline in the ego frame around the car (``route_window_ego``): what the planner
needs to turn a ``route`` answer into ego waypoints, from the simulator's map or the node's route topic.
"""

from __future__ import annotations

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import map_to_ego
from wamdiff2_ros.route_frame import RouteFrame

DEFAULT_PLAN_FRAME = "ego"
ROUTE_LATERALS = {"route": "centreline", "route_offset": "offset"}  # where d counts from (route_frame)
PLAN_FRAMES = (DEFAULT_PLAN_FRAME, *ROUTE_LATERALS)
PLAN_FRAME_KEY = "planning_plan_frame"
# The window of the route kept around the car: a 4 s plan at 30 m/s goes 120 m.
ROUTE_BEHIND_M = 10.0
ROUTE_AHEAD_M = 130.0
_STRAIGHT_X_M = np.arange(-ROUTE_BEHIND_M, ROUTE_AHEAD_M + 1.0, 2.0)
STRAIGHT_ROAD_ROUTE_EGO = np.stack([_STRAIGHT_X_M, np.zeros_like(_STRAIGHT_X_M)], 1)  # warm-ups, benches


def plan_frame_of(config: object) -> str:
    """The frame a model writes its plans in (its config's ``PLAN_FRAME_KEY``; ``ego`` when it has none)."""
    return str(getattr(config, PLAN_FRAME_KEY, DEFAULT_PLAN_FRAME))


def check_plan_frame(frame: str) -> str:
    if frame not in PLAN_FRAMES:
        raise InputError(f"plan frame must be one of {PLAN_FRAMES}, got {frame!r}")
    return frame


def route_window_ego(route_map: np.ndarray, ego_xy: np.ndarray, ego_yaw_rad: float) -> np.ndarray:
    """The route's vertices from ``ROUTE_BEHIND_M`` behind to ``ROUTE_AHEAD_M`` ahead of its vertex
    nearest the ego (along it), in the ego frame (x forward, y left). The nearest vertex is searched over
    the whole route (a route that passes near itself could be read at the wrong pass)."""
    route = np.asarray(route_map, dtype=np.float64)
    nearest = int(np.argmin(np.linalg.norm(route - np.asarray(ego_xy, dtype=np.float64), axis=1)))
    arcs = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(route, axis=0), axis=1))])
    arcs = arcs - arcs[nearest]
    keep = (arcs >= -ROUTE_BEHIND_M) & (arcs <= ROUTE_AHEAD_M)
    keep[max(nearest - 1, 0) : nearest + 2] = True  # two vertices at least, whatever the spacing
    return map_to_ego(route[keep], np.asarray(ego_xy, dtype=np.float64), float(ego_yaw_rad))


def plan_in_frame(waypoints_ego: np.ndarray, frame: str, route_ego: np.ndarray | None) -> np.ndarray:
    """The numbers an answer in ``frame`` writes for ``waypoints_ego`` (n, 2)."""
    if check_plan_frame(frame) == DEFAULT_PLAN_FRAME:
        return np.asarray(waypoints_ego, dtype=np.float64)
    s, d = _route(route_ego).from_xy(waypoints_ego, np.zeros(2), ROUTE_LATERALS[frame])
    return np.stack([s, d], -1)


def plan_to_ego(values: np.ndarray, frame: str, route_ego: np.ndarray | None) -> np.ndarray:
    """Ego-frame waypoints (n, 2) of an answer's numbers ``values`` (n, 2) written in ``frame``."""
    if check_plan_frame(frame) == DEFAULT_PLAN_FRAME:
        return np.asarray(values, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    return _route(route_ego).to_xy(values[:, 0], values[:, 1], np.zeros(2), ROUTE_LATERALS[frame])


def _route(route_ego: np.ndarray | None) -> RouteFrame:
    if route_ego is None:
        raise InputError("a plan along the route needs the route (its polyline in the ego frame)")
    return RouteFrame.from_points(route_ego)
