"""nav_msgs/Path (a navigation system's route: the CARLA ROS bridge's ``/carla/<role>/waypoints``) -> the
route's shape ahead of the ego that a ``branch_route`` model reads in its prompt
(``model.prompt.route_ahead``), and the route around the ego in its frame that a model planning along the
route needs to turn its answer into waypoints (``model.plan_frame.route_window_ego``: odometry's heading too).

The shape is taken in the route's own frame at its vertex nearest the ego, so only the ego's position in the
route's frame is needed: odometry's pose, when odometry is in that frame. A route in another frame, or one
the ego is far from, gives no shape (the node then publishes its fallback and says why): guessing a
transform or a route would steer the car by a route it is not on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from std_msgs.msg import Header

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.plan_frame import route_window_ego
from wamdiff2_ros.model.prompt import route_ahead
from wamdiff2_ros.nodes.convert.odometry import EgoPosition

MAX_OFF_ROUTE_M = 30.0  # farther than this from every route vertex: the route is not the ego's


@dataclass(frozen=True)
class Route:
    """A route polyline: ``points_m`` (M >= 2, 2), consecutive vertices distinct, in ``frame_id``."""

    frame_id: str
    points_m: np.ndarray


class NoRouteShape(InputError):
    """A route model's frame cannot be planned: no usable route for the ego's pose."""


def path_from_points(frame_id: str, points_m: np.ndarray) -> Path:
    """A route polyline (N, 2) as the nav_msgs/Path a navigation system publishes (``route_from_path``'s
    inverse; for tools that stand in for one)."""
    header = Header(frame_id=frame_id)
    path = Path(header=header)
    for x, y in np.asarray(points_m, dtype=np.float64):
        pose = PoseStamped(header=header)
        pose.pose.position.x, pose.pose.position.y = float(x), float(y)
        path.poses.append(pose)
    return path


def route_from_path(msg: Path) -> Route:
    """The path's poses as a polyline (repeated consecutive poses dropped).

    Raises:
        InputError: a non-finite position, fewer than two distinct poses, or no frame.
    """
    points = np.array([(p.pose.position.x, p.pose.position.y) for p in msg.poses], dtype=np.float64)
    points = points.reshape(-1, 2)
    if not np.isfinite(points).all():
        raise InputError("route has a non-finite pose")
    kept = list(points[:1])
    for point in points[1:]:
        if np.linalg.norm(point - kept[-1]) > 1e-6:  # against the last vertex kept: no zero-length segment
            kept.append(point)
    points = np.array(kept).reshape(-1, 2)
    if len(points) < 2:
        raise InputError(f"route needs two distinct poses, got {len(points)}")
    if not msg.header.frame_id:
        raise InputError("route has no frame_id")
    return Route(msg.header.frame_id, points)


def route_shape_ahead(route: Route | None, ego: EgoPosition | None) -> np.ndarray:
    """The route's shape ahead of ``ego`` (``model.prompt.route_ahead``).

    Raises:
        NoRouteShape: no route yet, no ego position, the two in different frames, or the ego more than
            ``MAX_OFF_ROUTE_M`` from every vertex.
    """
    position = _position_on(route, ego)
    return route_ahead(route.points_m, position)


def route_window(route: Route | None, ego: EgoPosition | None) -> np.ndarray:
    """The route around ``ego`` in the ego frame (``model.plan_frame.route_window_ego``).

    Raises:
        NoRouteShape: as ``route_shape_ahead``, or no heading in odometry's pose.
    """
    position = _position_on(route, ego)
    if ego.yaw_rad is None:
        raise NoRouteShape("odometry's orientation is not a rotation (the route turns into the ego frame)")
    return route_window_ego(route.points_m, position, ego.yaw_rad)


def _position_on(route: Route | None, ego: EgoPosition | None) -> np.ndarray:
    """The ego's position, checked to be on ``route`` (``route_shape_ahead``'s reasons)."""
    if route is None:
        raise NoRouteShape(
            "no route on ~/input/route, none received or withdrawn (the model reads its shape)"
        )
    if ego is None:
        raise NoRouteShape("no ego position yet (odometry)")
    if ego.frame_id != route.frame_id:
        raise NoRouteShape(f"route is in frame {route.frame_id!r}, odometry in {ego.frame_id!r}")
    position = np.asarray(ego.xy_m, dtype=np.float64)
    off_m = float(np.linalg.norm(route.points_m - position, axis=1).min())
    if off_m > MAX_OFF_ROUTE_M:
        raise NoRouteShape(f"ego is {off_m:.0f} m from the route (more than {MAX_OFF_ROUTE_M:.0f})")
    return position
