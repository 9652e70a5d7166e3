"""One closed-loop episode traced: at every plan, the policy's plan beside the expert's from the same state,
and optionally plans sampled from the same frame (not driven): whether the expert's plan is among what the
model would say, or beyond it.

A driving score says that an episode failed; the trace says where the policy left the expert (the
data-generating driver, ``expert.expert_plan``, which is also what DAgger labels a reached state with): a
standing start it never leaves, a turn it does not take, a braking it starts too early.
``wamdiff2 eval trace`` prints it and writes it as JSON lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from wamdiff2_ros.model.prompt import navigation_text
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

# Plans sampled from an observation (``ModelPolicy.candidates`` of a sampling planner): shown, not driven.
Sampler = Callable[[Observation], list[np.ndarray]]
NEAR_EXPERT_M = 3.0  # a sampled plan whose 4 s point lies this close to the expert's counts as its plan


@dataclass(frozen=True)
class TracePoint:
    """One plan of a traced episode: the state it was made in, the policy's plan and the expert's."""

    time_s: float
    speed_mps: float
    command: str
    plan: np.ndarray  # (8, 2) ego-frame waypoints, 0.5 s apart
    expert: np.ndarray  # (8, 2) the expert's plan from the same state
    samples: np.ndarray = field(default_factory=lambda: np.zeros((0, 8, 2)))  # (N, 8, 2), not driven

    def near_expert(self) -> int:
        """How many sampled plans end (4 s ahead) within ``NEAR_EXPERT_M`` of the expert's plan."""
        gaps = np.linalg.norm(self.samples[:, -1] - self.expert[-1], axis=-1)
        return int((gaps <= NEAR_EXPERT_M).sum())

    def row(self) -> dict:
        """The point as a JSON-ready dict (``samples`` only where plans were sampled)."""
        row = {
            "time_s": round(self.time_s, 3),
            "speed_mps": round(self.speed_mps, 3),
            "command": self.command,
            "plan": np.round(self.plan, 3).tolist(),
            "expert": np.round(self.expert, 3).tolist(),
        }
        if len(self.samples):
            row["samples"] = np.round(self.samples, 3).tolist()
        return row


class _Traced:
    """A policy that records each of its plans beside the expert's plan from the same state (the live
    scene, read as the expert baseline reads it)."""

    def __init__(
        self, policy: Policy, scene: Scene, points: list[TracePoint], sampler: Sampler | None = None
    ) -> None:
        self.policy, self.scene, self.points, self.sampler = policy, scene, points, sampler

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
        sampled = self.sampler(observation) if self.sampler else []
        samples = np.asarray(sampled, dtype=np.float64).reshape(-1, *plan.shape)  # (0, 8, 2) when none
        # the command as the policy read it
        command = navigation_text(observation.command, observation.command_distance_m)
        if observation.route_ahead_m is not None:  # its 40 m point: the whole route would not fit a column
            command += " to {:.0f},{:.0f}".format(*observation.route_ahead_m[-1])
        self.points.append(TracePoint(observation.time_s, speed, command, plan, expert, samples))
        return plan


def trace_episode(
    seed: int,
    factory: PolicyFactory,
    config: ClosedLoopConfig,
    kind: str | None = None,
    sampler: Sampler | None = None,
) -> tuple[EpisodeResult, list[TracePoint]]:
    """Drive one seeded episode as ``evaluate_closed_loop`` does, and trace every plan (with ``sampler``,
    also the plans it samples from each observation; the episode drives the same).

    Returns:
        The episode's result and one point per plan, in time order.
    """
    points: list[TracePoint] = []
    result = run_episode(seed, lambda scene: _Traced(factory(scene), scene, points, sampler), config, kind)
    return result, points
