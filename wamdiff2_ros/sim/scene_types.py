"""What a scene is read out as: vehicles, snapshots and lane strips in the right-handed map frame.

The map frame is x east, y north, yaw counter-clockwise. highway-env draws y downwards, so every position has
its y negated and every heading its sign flipped (``to_map_xy``), as the CARLA ROS bridge does for Unreal's
left-handed frame. These are plain values: nothing here imports highway-env.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CAR_HEIGHT_M = 1.5


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
