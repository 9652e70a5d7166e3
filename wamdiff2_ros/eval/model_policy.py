"""The model as a closed-loop policy: the front image and telemetry go through ``Planner.plan`` (the same
prompt, decoder and parser as the ROS planner node), and the first candidate that parses is driven.

A plan that does not parse is counted and replaced by constant velocity (what the node's fallback would
publish is similar: a held or a stopping trajectory), so that a parse failure shows in the counters rather
than ending the episode.
"""

from __future__ import annotations

import numpy as np

from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.eval.baselines import constant_velocity_waypoints
from wamdiff2_ros.sim.closed_loop import Observation, PolicyFactory
from wamdiff2_ros.sim.scenes import Scene


class ModelPolicy:
    """Plans with a loaded model; counts plans, unparsable plans and decoder forwards."""

    needs_image = True

    def __init__(self, planner: Planner):
        self.planner = planner
        self.plans = 0
        self.fallbacks = 0
        self.forwards = 0

    def __call__(self, observation: Observation) -> np.ndarray:
        output = self.planner.plan(
            DrivingInputs(
                image_rgb=observation.image_rgb,
                command=observation.command,
                velocity_mps=tuple(float(v) for v in observation.velocity_ego_mps),
                acceleration_mps2=tuple(float(a) for a in observation.accel_ego_mps2),
            )
        )
        self.plans += 1
        self.forwards += output.decode.forwards
        parsed = [c.waypoints_ego for c in output.candidates if c.waypoints_ego is not None]
        if not parsed:
            self.fallbacks += 1
            return constant_velocity_waypoints(observation.velocity_ego_mps)
        return parsed[0]

    def counters(self) -> dict:
        """Plans, fallbacks (unparsable plans) and mean forwards per plan so far."""
        per_plan = self.forwards / self.plans if self.plans else 0.0
        return {"plans": self.plans, "fallbacks": self.fallbacks, "forwards_per_plan": per_plan}


def model_policy_factory(policy: ModelPolicy) -> PolicyFactory:
    """A factory that hands the same loaded policy to every episode (it does not read the scene)."""

    def factory(scene: Scene) -> ModelPolicy:
        return policy

    return factory
