"""DAgger data: a policy drives seeded scenes in the closed loop, and the states it reaches are labelled by
the privileged expert (``expert.expert_plan``: what the data-generating driver would do from there).

Plain ``generate`` data holds only the expert's own states, so a model trained on it never sees a standing
start it caused, a drift in a roundabout or a crossing car it came too close to; rolled out by the current
model, these are the states it needs to learn to leave. Samples are written in ``generate``'s layout (the
planning answer is the expert's plan from the reached state; detection and QA describe the frame as
``generate`` does), so training reads them like any other data folder.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, PolicyFactory, run_episode
from wamdiff2_ros.sim.dataset import GenerateConfig, episode_seed, generate, sample
from wamdiff2_ros.sim.engine import SIM_HZ
from wamdiff2_ros.sim.expert import HORIZON_TICKS, expert_plan, ground_truth
from wamdiff2_ros.sim.ordered_pool import ordered_results
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scene_types import Snapshot
from wamdiff2_ros.sim.scenes import Scene

MAX_EPISODES_PER_SAMPLE = 4
# a pool silent this long is replaced (sim/ordered_pool.py): a worker's first episode loads the model
DAGGER_STALL_S = 240.0


class _Labeller:
    """Observer of one episode: keeps every snapshot, and the expert's plan every ``stride_ticks`` from
    ``first_tick`` (as ``generate`` samples)."""

    def __init__(self, stride_ticks: int, first_tick: int) -> None:
        self.stride_ticks = stride_ticks
        self.first_tick = first_tick
        self.scene: Scene | None = None
        self.log: list[Snapshot] = []
        self.plans: dict[int, np.ndarray] = {}

    def __call__(self, scene: Scene, snapshot: Snapshot, tick: int) -> None:
        self.scene = scene
        self.log.append(snapshot)
        if tick >= self.first_tick and (tick - self.first_tick) % self.stride_ticks == 0:
            self.plans[tick] = expert_plan(scene)

    def drive_on(self) -> None:
        """Extend the log past the episode's end by a horizon, the ego holding its wheel and speed, so that
        every labelled state has the other vehicles' futures (a crashed ego stays where it hit). The
        episode stepped the scene once after the last snapshot it showed the observer: that state first."""
        self.scene.ego.action = {"steering": 0.0, "acceleration": 0.0}
        self.log.append(self.scene.snapshot())
        for _ in range(HORIZON_TICKS - 1):
            self.scene.step()
            self.log.append(self.scene.snapshot())


def episode_samples(
    episode: int, config: GenerateConfig, policy_factory: PolicyFactory, loop: ClosedLoopConfig
) -> list[dict]:
    """The labelled samples of one closed-loop episode (those with a full horizon of snapshots after them,
    so that the other vehicles' futures are known: all of them with ``config.label_last_states``)."""
    labeller = _Labeller(round(config.stride_s * SIM_HZ), config.first_sample_tick)
    result = run_episode(
        episode_seed(config.seed, episode),
        policy_factory,
        loop,
        kind=config.drive_kind,
        observer=labeller,
        highway_events_only=config.highway_events_only,
    )
    if config.label_last_states:
        labeller.drive_on()
    out = []
    for index, plan in labeller.plans.items():
        if index + HORIZON_TICKS >= len(labeller.log):
            continue
        frame = render_front(config.camera, labeller.scene.lanes, labeller.log[index])
        truth = ground_truth(labeller.log, index, labeller.scene, frame, config.command_rule)
        truth = replace(truth, waypoints_ego=plan)
        out.append(sample(f"d{episode:06d}_t{index:04d}", frame.image_rgb, truth, result.kind, config))
    return out


def generate_dagger(
    config: GenerateConfig,
    make_policy: Callable[[], PolicyFactory],
    loop: ClosedLoopConfig,
    progress: bool = True,
    workers: int = 1,
) -> dict:
    """Write ``config.samples`` DAgger samples (episodes of seeds ``episode_seed(config.seed, e)``) into
    ``config.out_dir``; ``generate``'s summary. A policy whose episodes end within 5 s gives no samples:
    after ``MAX_EPISODES_PER_SAMPLE`` episodes per sample asked for, what there is gets written (the summary
    says how many).

    Args:
        make_policy: builds the policy factory, once per process (with ``workers`` > 1 it crosses to
            spawned processes, so it must pickle: a module-level function or a dataclass instance).
        workers: processes driving episodes side by side; the samples are those of one process (episodes
            are taken in order and each is seeded by its index).
    """
    limit = MAX_EPISODES_PER_SAMPLE * config.samples

    def episodes() -> Iterator[list[dict]]:
        if workers <= 1:
            factory = make_policy()
            for episode in range(limit):
                yield episode_samples(episode, config, factory, loop)
            return
        # spawn, not fork: a model's threads and CUDA state do not survive a fork
        context = multiprocessing.get_context("spawn")
        job = lambda episode: (episode, config, loop, make_policy)  # noqa: E731
        yield from ordered_results(
            context, workers, _worker_episode, job, 4 * workers, count=limit, stall_s=DAGGER_STALL_S
        )

    return generate(config, progress, episodes())


_worker_factory: PolicyFactory | None = None  # a worker process's, built by its first episode


def _worker_episode(
    job: tuple[int, GenerateConfig, ClosedLoopConfig, Callable[[], PolicyFactory]],
) -> list[dict]:
    # Built here rather than in a Pool initializer: an initializer's exception respawns workers forever,
    # a job's reaches the parent.
    global _worker_factory
    episode, config, loop, make_policy = job
    if _worker_factory is None:
        _worker_factory = make_policy()
    return episode_samples(episode, config, _worker_factory, loop)
