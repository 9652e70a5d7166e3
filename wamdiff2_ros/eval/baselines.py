"""Baseline policies reported with every evaluation: the privileged expert and constant velocity.

Both follow ``sim.closed_loop.Policy``; a model-backed policy plugs in the same way (a callable from an
``Observation`` to 8 ego-frame waypoints, with ``needs_image = True``).
"""

from __future__ import annotations

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import DEFAULT_COMMAND_RULE, NUM_WAYPOINTS, WAYPOINT_DT_S
from wamdiff2_ros.sim.closed_loop import Observation, PolicyFactory
from wamdiff2_ros.sim.expert import expert_plan
from wamdiff2_ros.sim.scenes import Scene

WAYPOINT_TIMES_S = np.arange(1, NUM_WAYPOINTS + 1) * WAYPOINT_DT_S


def constant_velocity_waypoints(velocity_ego_mps: np.ndarray) -> np.ndarray:
    """Keep the current velocity vector for 4 s: waypoint k at ``v * 0.5 k`` (8, 2)."""
    return WAYPOINT_TIMES_S[:, None] * np.asarray(velocity_ego_mps, dtype=np.float64)[None, :]


class ConstantVelocityPolicy:
    """Drives straight on at the current speed: blind to road, traffic and command."""

    needs_image = False
    command_rule = DEFAULT_COMMAND_RULE  # read by no one

    def __call__(self, observation: Observation) -> np.ndarray:
        return constant_velocity_waypoints(observation.velocity_ego_mps)


class ExpertPolicy:
    """The simulator's IDM/MOBIL expert, re-planned from the live scene (privileged: it sees everything)."""

    needs_image = False
    command_rule = DEFAULT_COMMAND_RULE  # it follows the route itself

    def __init__(self, scene: Scene):
        self.scene = scene

    def __call__(self, observation: Observation) -> np.ndarray:
        return expert_plan(self.scene)


BASELINE_FACTORIES: dict[str, PolicyFactory] = {
    "expert": ExpertPolicy,
    "constant-velocity": lambda scene: ConstantVelocityPolicy(),
}


def baseline_factory(name: str) -> PolicyFactory:
    """The policy factory of a baseline by name.

    Raises:
        InputError: unknown name.
    """
    if name not in BASELINE_FACTORIES:
        raise InputError(f"unknown policy {name!r}; choose from {sorted(BASELINE_FACTORIES)}")
    return BASELINE_FACTORIES[name]
