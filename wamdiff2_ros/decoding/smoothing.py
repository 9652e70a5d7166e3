"""Plan smoothing: the decoded waypoints fitted by the nearest plan whose jerk is small.

A plan is 8 waypoints 0.5 s apart written to 0.01 m; their jerk is a third difference over 0.125 s^3, so a
few centimetres of disagreement between neighbouring waypoints reads as more jerk than NAVSIM's comfort
bounds allow (4.13 m/s^3 longitudinal), and most decoded plans fail them. ``smooth_waypoints`` returns the
least-squares fit that trades distance to the waypoints against the squared third differences of the
sequence (the ego one step back at its current velocity, the ego now, the 8 waypoints): a linear map of the
waypoints and the velocity, one (8, 8) solve made once per weight. A plan at constant velocity is its own
fit, and a hard brake keeps its strength (a 4 m/s^2 stop from 15 m/s moves by under 0.15 m: tested).
docs/DECISIONS.md, "plan smoothing", says how the weight was chosen and what it changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from wamdiff2_ros.model.prompt import NUM_WAYPOINTS

STEP_S = 0.5
DEFAULT_WEIGHT = 1.0  # comfort 0.09 -> 0.69 on the selection set at an unchanged ADE (0.3: 0.60, 3: 0.70)


@lru_cache(maxsize=8)
def _fit(weight: float) -> tuple[np.ndarray, np.ndarray]:
    """(M, c): the fit is ``M @ waypoints + c * (velocity * STEP_S)``, per axis."""
    points = NUM_WAYPOINTS + 2  # the ego a step back, the ego now, the waypoints
    third = np.eye(points)
    for _ in range(3):
        third = third[1:] - third[:-1]
    known, unknown = third[:, :2], third[:, 2:]
    normal = np.eye(NUM_WAYPOINTS) + weight * unknown.T @ unknown
    fit = np.linalg.solve(normal, np.eye(NUM_WAYPOINTS))
    # the ego a step back sits at -velocity * STEP_S, the ego now at 0
    back = known @ np.array([-1.0, 0.0])
    return fit, -weight * fit @ unknown.T @ back


def smooth_waypoints(
    waypoints_ego: np.ndarray, velocity_ego_mps: Sequence[float], weight: float = DEFAULT_WEIGHT
) -> np.ndarray:
    """The plan nearest ``waypoints_ego`` (8, 2) with small jerk, starting at the ego's velocity.

    Args:
        waypoints_ego: (8, 2) metres, x forward, y left, 0.5 s apart.
        velocity_ego_mps: the ego's current (vx, vy) in its frame.
        weight: the jerk term's weight against the distance term (0: the waypoints as they are).

    Returns:
        (8, 2) float64.
    """
    waypoints = np.asarray(waypoints_ego, dtype=np.float64)
    if weight == 0:
        return waypoints.copy()
    fit, offset = _fit(float(weight))
    step = np.asarray(velocity_ego_mps, dtype=np.float64)[:2] * STEP_S
    return fit @ waypoints + offset[:, None] * step[None, :]
