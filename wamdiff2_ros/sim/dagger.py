"""DAgger data: a policy drives seeded scenes in the closed loop, and the states it reaches are labelled by
the privileged expert (``expert.expert_plan``: what the data-generating driver would do from there).

Plain ``generate`` data holds only the expert's own states, so a model trained on it never sees a standing
start it caused, a drift in a roundabout or a crossing car it came too close to; rolled out by the current
model, these are the states it needs to learn to leave. Samples are written in ``generate``'s layout (the
planning answer is the expert's plan from the reached state; detection and QA describe the frame as
``generate`` does), so training reads them like any other data folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, PolicyFactory, run_episode
from wamdiff2_ros.sim.dataset import GenerateConfig, episode_seed, generate, sample
from wamdiff2_ros.sim.engine import SIM_HZ
from wamdiff2_ros.sim.expert import HORIZON_TICKS, expert_plan, ground_truth
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scene_types import Snapshot
from wamdiff2_ros.sim.scenes import Scene

MAX_EPISODES_PER_SAMPLE = 4


class _Labeller:
    """Observer of one episode: keeps every snapshot, and the expert's plan every ``stride_ticks``."""

    def __init__(self, stride_ticks: int) -> None:
        self.stride_ticks = stride_ticks
        self.scene: Scene | None = None
        self.log: list[Snapshot] = []
        self.plans: dict[int, np.ndarray] = {}

    def __call__(self, scene: Scene, snapshot: Snapshot, tick: int) -> None:
        self.scene = scene
        self.log.append(snapshot)
        if tick >= SIM_HZ and tick % self.stride_ticks == 0:  # from 1 s in, as generate samples
            self.plans[tick] = expert_plan(scene)


def episode_samples(
    episode: int, config: GenerateConfig, policy_factory: PolicyFactory, loop: ClosedLoopConfig
) -> list[dict]:
    """The labelled samples of one closed-loop episode (those with a full horizon of snapshots after them,
    so that the other vehicles' futures are known)."""
    labeller = _Labeller(round(config.stride_s * SIM_HZ))
    result = run_episode(episode_seed(config.seed, episode), policy_factory, loop, observer=labeller)
    out = []
    for index, plan in labeller.plans.items():
        if index + HORIZON_TICKS >= len(labeller.log):
            continue
        frame = render_front(config.camera, labeller.scene.lanes, labeller.log[index])
        truth = replace(ground_truth(labeller.log, index, labeller.scene, frame), waypoints_ego=plan)
        out.append(sample(f"d{episode:06d}_t{index:04d}", frame.image_rgb, truth, result.kind, config))
    return out


def generate_dagger(
    config: GenerateConfig, policy_factory: PolicyFactory, loop: ClosedLoopConfig, progress: bool = True
) -> dict:
    """Write ``config.samples`` DAgger samples (episodes of seeds ``episode_seed(config.seed, e)``, one at a
    time: the policy is usually a model) into ``config.out_dir``; ``generate``'s summary. A policy whose
    episodes end within 5 s gives no samples: after ``MAX_EPISODES_PER_SAMPLE`` episodes per sample asked
    for, what there is gets written (the summary says how many)."""

    def episodes() -> Iterator[list[dict]]:
        for episode in range(MAX_EPISODES_PER_SAMPLE * config.samples):
            yield episode_samples(episode, config, policy_factory, loop)

    return generate(config, progress, episodes())
