"""One closed-loop episode traced: at every plan, the policy's plan beside the expert's from the same state.

A driving score says that an episode failed; the trace says where the policy left the expert (the
data-generating driver, ``expert.expert_plan``, which is also what DAgger labels a reached state with): a
standing start it never leaves, a turn it does not take, a braking it starts too early.
``wamdiff2 eval trace`` prints it and writes it as JSON lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.sim.closed_loop import (
    ClosedLoopConfig,
    EpisodeResult,
    Observation,
    Policy,
    PolicyFactory,
    run_episode,
)
from wamdiff2_ros.sim.expert import expert_plan
from wamdiff2_ros.sim.scenes import Scene


@dataclass(frozen=True)
class TracePoint:
    """One plan of a traced episode: the state it was made in, the policy's plan and the expert's."""

    time_s: float
    speed_mps: float
    command: str
    plan: np.ndarray  # (8, 2) ego-frame waypoints, 0.5 s apart
    expert: np.ndarray  # (8, 2) the expert's plan from the same state

    def row(self) -> dict:
        """The point as a JSON-ready dict."""
        return {
            "time_s": round(self.time_s, 3),
            "speed_mps": round(self.speed_mps, 3),
            "command": self.command,
            "plan": np.round(self.plan, 3).tolist(),
            "expert": np.round(self.expert, 3).tolist(),
        }


class _Traced:
    """A policy that records each of its plans beside the expert's plan from the same state (the live
    scene, read as the expert baseline reads it)."""

    def __init__(self, policy: Policy, scene: Scene, points: list[TracePoint]) -> None:
        self.policy, self.scene, self.points = policy, scene, points

    @property
    def needs_image(self) -> bool:
        return self.policy.needs_image

    @property
    def command_rule(self) -> str:
        return self.policy.command_rule

    def __call__(self, observation: Observation) -> np.ndarray:
        plan = np.asarray(self.policy(observation), dtype=np.float64)
        speed = float(np.hypot(*observation.velocity_ego_mps))
        expert = expert_plan(self.scene)
        self.points.append(TracePoint(observation.time_s, speed, observation.command, plan, expert))
        return plan


def trace_episode(
    seed: int, factory: PolicyFactory, config: ClosedLoopConfig, kind: str | None = None
) -> tuple[EpisodeResult, list[TracePoint]]:
    """Drive one seeded episode as ``evaluate_closed_loop`` does, and trace every plan.

    Returns:
        The episode's result and one point per plan, in time order.
    """
    points: list[TracePoint] = []
    result = run_episode(seed, lambda scene: _Traced(factory(scene), scene, points), config, kind)
    return result, points
