"""Coordinates along a route: ``s`` metres along it, ``d`` metres to its left (a Frenet frame on a polyline).

``s`` counts from a car's place on the route (its nearest point). Where ``d`` counts from (``LATERALS``):
``centreline``, the route's centreline (``d = 0`` steers a car back into the lane); ``offset``, the car's
present offset from it, normal to the route (``d = 0`` follows the route's shape at the car's offset: the
car's own lateral moves, as an ego-frame plan writes them on a straight road); ``moved``, the route's shape
moved (translated) to the car (measured worse: through a turn the car's offset turns with the road, and it
cuts corners off the road). A plan written this way says how far the car goes (its speed profile) and how
far it leaves the route; where the road turns, the route turns it (docs/DECISIONS.md, "plans written along
the route").
Positions are in whatever frame the route's points are (map or ego); before its first point and past its
last the route goes on straight. A position's place on the route is its nearest point over the
whole route: a route that passes near itself (a roundabout's entry and exit) would need the search kept to a
window around the car's last place (not built: the probe that uses this reads it once per plan).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.errors import InputError

STRAIGHT_ON_M = 500.0  # how far before its start and past its end the route is taken to go on straight
# A polyline's corners are rounded this many times: outside a bend, the positions nearest a vertex all
# project onto it and keep only their offset along its normal, so a corner of angle a loses up to d sin(a)
# of a position d from the route; three rounds divide the angles by 8 (a 2 m polyline on a 12 m radius:
# 10 degrees to 1.2), moving the route by centimetres.
CORNER_ROUNDS = 3
# Rounding a sparse route (a navigation stack's points 30 m apart) would move a corner metres inside the
# road: segments longer than this are first cut into pieces of DENSE_SPACING_M. The simulator's routes (2 m
# apart, 7.7 m across some roundabout joints) keep their shape.
SPARSE_SEGMENT_M = 8.0
DENSE_SPACING_M = 2.0
LATERALS = ("centreline", "offset", "moved")


@dataclass(frozen=True)
class RouteFrame:
    """A route polyline with its arc lengths. Build with ``from_points``."""

    points: np.ndarray  # (N, 2), consecutive points apart, the first and last STRAIGHT_ON_M beyond its ends
    arcs: np.ndarray  # (N,) arc length at each point from the route's first point

    @classmethod
    def from_points(cls, route_xy: np.ndarray) -> RouteFrame:
        """The frame of a route through ``route_xy`` (N >= 2 points; repeated points are dropped)."""
        route = np.asarray(route_xy, dtype=np.float64)
        if route.ndim != 2 or route.shape[1] != 2:
            raise InputError(f"a route is (N, 2) points, got shape {route.shape}")
        route = _distinct(route)
        if len(route) < 2:
            raise InputError("a route needs two distinct points")
        head, tail = route[1] - route[0], route[-1] - route[-2]
        before = route[0] - STRAIGHT_ON_M * head / np.linalg.norm(head)
        after = route[-1] + STRAIGHT_ON_M * tail / np.linalg.norm(tail)
        points = np.vstack([before, _distinct(_rounded(_densified(route))), after])
        lengths = np.linalg.norm(np.diff(points, axis=0), axis=1)
        return cls(points, np.concatenate([[0.0], np.cumsum(lengths)]) - STRAIGHT_ON_M)  # 0 at its start

    def position(self, arc: np.ndarray) -> np.ndarray:
        """The route's points (..., 2) at arc lengths ``arc`` (...), clamped to the route."""
        arc = np.asarray(arc, dtype=np.float64)
        return np.stack([np.interp(arc, self.arcs, self.points[:, axis]) for axis in (0, 1)], -1)

    def left(self, arc: np.ndarray) -> np.ndarray:
        """The unit vectors (..., 2) to the route's left at arc lengths ``arc``: its segment's there."""
        segment = np.clip(np.searchsorted(self.arcs, arc, side="right") - 1, 0, len(self.points) - 2)
        direction = self.points[segment + 1] - self.points[segment]
        direction = direction / np.linalg.norm(direction, axis=-1, keepdims=True)
        return np.stack([-direction[..., 1], direction[..., 0]], -1)

    def project(self, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Arc length of the nearest route point and the signed offset to the route's left, for points
        ``xy`` (..., 2)."""
        xy = np.asarray(xy, dtype=np.float64)
        flat = xy.reshape(-1, 2)
        starts, segments = self.points[:-1], np.diff(self.points, axis=0)
        relative = flat[:, None, :] - starts  # (M, N - 1, 2)
        squared = np.einsum("ij,ij->i", segments, segments)
        along = np.clip(np.einsum("mij,ij->mi", relative, segments) / squared, 0.0, 1.0)
        distance = np.linalg.norm(relative - along[..., None] * segments, axis=-1)
        nearest = np.argmin(distance, axis=1)
        arc = self.arcs[nearest] + along[np.arange(len(flat)), nearest] * np.sqrt(squared[nearest])
        offset = np.einsum("mj,mj->m", flat - self.position(arc), self.left(arc))
        arc, offset = arc.reshape(xy.shape[:-1]), offset.reshape(xy.shape[:-1])
        return arc, offset

    def to_xy(
        self, s: np.ndarray, d: np.ndarray, origin_xy: np.ndarray, lateral: str = "centreline"
    ) -> np.ndarray:
        """Positions (..., 2) of coordinates (``s``, ``d``) from ``origin_xy``'s place on the route, ``d``
        counted as ``lateral`` says (``LATERALS``)."""
        start, offset = self.project(origin_xy)
        arc = start + np.asarray(s, dtype=np.float64)
        d = np.asarray(d, dtype=np.float64) + (offset if _lateral(lateral) == "offset" else 0.0)
        on_route = self.position(arc) + (origin_xy - self.position(start) if lateral == "moved" else 0.0)
        return on_route + d[..., None] * self.left(arc)

    def from_xy(
        self, xy: np.ndarray, origin_xy: np.ndarray, lateral: str = "centreline"
    ) -> tuple[np.ndarray, np.ndarray]:
        """The coordinates (s, d) of positions ``xy`` (..., 2) counted from ``origin_xy``'s place on the
        route, ``d`` as ``lateral`` says: the inverse of ``to_xy`` where the route's curvature radius
        exceeds |d|."""
        start, offset = self.project(origin_xy)
        shift = self.position(start) - origin_xy if _lateral(lateral) == "moved" else 0.0
        arc, d = self.project(np.asarray(xy, dtype=np.float64) + shift)
        return arc - start, d - (offset if lateral == "offset" else 0.0)


def _distinct(route: np.ndarray) -> np.ndarray:
    """``route`` without points repeating the one before (no segment without a direction)."""
    keep = np.concatenate([[True], np.linalg.norm(np.diff(route, axis=0), axis=1) > 1e-9])
    return route[keep]


def _densified(route: np.ndarray) -> np.ndarray:
    """``route`` with its segments longer than ``SPARSE_SEGMENT_M`` cut into pieces of at most
    ``DENSE_SPACING_M``."""
    pieces = np.linalg.norm(np.diff(route, axis=0), axis=1)
    pieces = np.where(pieces > SPARSE_SEGMENT_M, np.ceil(pieces / DENSE_SPACING_M), 1).astype(int)
    ends = zip(route[:-1], route[1:], pieces, strict=True)
    cuts = [start + np.arange(n)[:, None] / n * (end - start) for start, end, n in ends]
    return np.vstack([*cuts, route[-1:]])


def _rounded(route: np.ndarray, rounds: int = CORNER_ROUNDS) -> np.ndarray:
    """``route`` with its corners cut (Chaikin: each segment's quarter and three-quarter points), its end
    points kept."""
    for _ in range(rounds):
        starts, ends = route[:-1], route[1:]
        cuts = np.stack([0.75 * starts + 0.25 * ends, 0.25 * starts + 0.75 * ends], 1).reshape(-1, 2)
        route = np.vstack([route[:1], cuts[1:-1], route[-1:]])
    return route


def _lateral(lateral: str) -> str:
    if lateral not in LATERALS:
        raise InputError(f"lateral must be one of {LATERALS}, got {lateral!r}")
    return lateral
