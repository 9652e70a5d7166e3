"""The model as a closed-loop policy: the front image and telemetry go through ``Planner.plan`` (the same
prompt, decoder and parser as the ROS planner node), and the first candidate that parses is driven; or, as
the planner and scorer nodes do together (``ScoredModelPolicy``), the candidate the online scorer picks
given the model's own detections.

A plan that does not parse is counted and replaced by constant velocity (what the node's fallback would
publish is similar: a held or a stopping trajectory), so that a parse failure shows in the counters rather
than ending the episode.
"""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.eval.baselines import constant_velocity_waypoints
from wamdiff2_ros.eval.metrics import Agents
from wamdiff2_ros.eval.scoring import ScorerSettings, agents_from_boxes, score_candidates
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.default import default_model_dir
from wamdiff2_ros.model.plan_frame import DEFAULT_PLAN_FRAME
from wamdiff2_ros.model.prompt import command_rule_of, detection_user_text
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, Observation, PolicyFactory
from wamdiff2_ros.sim.scenes import Scene


class ModelPolicy:
    """Plans with a loaded model; counts plans, unparsable plans and decoder forwards."""

    needs_image = True

    def __init__(self, planner: Planner):
        self.planner = planner
        self.command_rule = command_rule_of(planner.loaded.model.config)  # the rule it was trained on
        self.plans_along_route = planner.plan_frame != DEFAULT_PLAN_FRAME  # it needs the route's polyline
        self.plans = 0
        self.fallbacks = 0
        self.forwards = 0

    def __call__(self, observation: Observation) -> np.ndarray:
        parsed = self.candidates(observation)
        if not parsed:
            self.fallbacks += 1
            return constant_velocity_waypoints(observation.velocity_ego_mps)
        return parsed[0]

    def candidates(self, observation: Observation) -> list[np.ndarray]:
        """The plan's candidates that parse, in order (counted as one plan)."""
        output = self.planner.plan(
            DrivingInputs(
                image_rgb=observation.image_rgb,
                command=observation.command,
                velocity_mps=tuple(float(v) for v in observation.velocity_ego_mps),
                acceleration_mps2=tuple(float(a) for a in observation.accel_ego_mps2),
                command_distance_m=observation.command_distance_m,
                route_ahead_m=observation.route_ahead_m,
                route_ego_m=observation.route_ego_m if self.plans_along_route else None,
            )
        )
        self.plans += 1
        self.forwards += output.decode.forwards
        return [c.waypoints_ego for c in output.candidates if c.waypoints_ego is not None]

    def start_episode(self) -> None:
        """A new drive begins: the plain policy keeps nothing between plans."""

    TALLIES = ("plans", "fallbacks", "forwards")

    def tallies(self) -> dict[str, int]:
        """The raw counts behind ``counters``, to add up across processes (``add_tallies``)."""
        return {name: getattr(self, name) for name in self.TALLIES}

    def add_tallies(self, tallies: dict[str, int]) -> None:
        for name, count in tallies.items():
            setattr(self, name, getattr(self, name) + count)

    def counters(self) -> dict:
        """Plans, fallbacks (unparsable plans) and mean forwards per plan so far."""
        per_plan = self.forwards / self.plans if self.plans else 0.0
        return {"plans": self.plans, "fallbacks": self.fallbacks, "forwards_per_plan": per_plan}


# The node detects after every ``output.detections_every_n``-th plan (5): at 5 Hz on the CPU, once a second,
# and the scorer keeps boxes for 1 s (``ScorerSettings.detections_max_age_s``). The harness plans at 2 Hz, so
# a detection every 2nd plan is the node's cadence in time; every 5th plan (the default before 2026-12-08)
# left the scorer without fresh boxes for 3 plans of 5 (docs/log/seeing-model-fifth-run-2026-12-03.md,
# "The scorer's boxes at the node's cadence").
DETECT_EVERY_PLANS = 2


class ScoredModelPolicy(ModelPolicy):
    """The planner and scorer nodes in the loop: the planner's K candidates, its detection (the K answers
    fused, as the node's) after every ``detect_every``-th plan (the boxes kept in between, as the scorer
    keeps the latest, so a plan is scored against the boxes of an earlier frame, and not used once they are
    older than ``settings.detections_max_age_s``, as the scorer drops them), and the candidate the
    online PDM scorer selects. Counts how often the scorer drove another candidate than the greedy one, how
    often it did so because candidate 0 hit a detected vehicle, and how often it drove its own stop
    because every candidate did.

    Args:
        planner: the model, configured with K > 1 candidates (the node's: candidate 0 greedy).
        camera: the rendered camera (places the boxes on the ground).
        detect_every: plans between detection answers (the node's ``output.detections_every_n``).
        detect_max_tokens: the detection answer's budget (``output.detections_max_tokens``).
        settings: the scorer's (the scorer node's defaults when None).
    """

    TALLIES = (*ModelPolicy.TALLIES, "detections", "scorer_changed", "colliding_greedy_dropped", "stops")

    def __init__(
        self,
        planner: Planner,
        camera: Camera,
        detect_every: int = DETECT_EVERY_PLANS,
        detect_max_tokens: int = 256,
        settings: ScorerSettings | None = None,
    ) -> None:
        super().__init__(planner)
        self.camera, self.settings = camera, settings or ScorerSettings()
        self.detect_every, self.detect_max_tokens = detect_every, detect_max_tokens
        self.detections = self.scorer_changed = self.colliding_greedy_dropped = self.stops = 0
        self.start_episode()

    def start_episode(self) -> None:
        """A new drive begins, as a node pair started on it: no boxes yet, the detection cadence from 0."""
        self.boxes_px, self.boxes_time_s, self.episode_plans = np.zeros((0, 4)), 0.0, 0

    def __call__(self, observation: Observation) -> np.ndarray:
        parsed = self.candidates(observation)
        if not parsed:
            plan = constant_velocity_waypoints(observation.velocity_ego_mps)
            self.fallbacks += 1
        else:
            agents = self.scorer_agents(observation)
            scored = score_candidates(parsed, observation.velocity_ego_mps, agents, self.settings)
            plan = scored.trajectories[scored.selected]
            if scored.selected != 0:
                self.scorer_changed += 1
                self.colliding_greedy_dropped += scored.scores[0]["no_collision"] == 0.0
                self.stops += scored.stopped
        self.episode_plans += 1
        if self.episode_plans % self.detect_every == 0:  # after every detect_every-th plan, as the node
            self.detect(observation)
        return plan

    def scorer_agents(self, observation: Observation) -> Agents:
        """The vehicles the scorer sees: the latest boxes (the node detects after it has published the
        plan), none once they are older than ``settings.detections_max_age_s``."""
        fresh = observation.time_s - self.boxes_time_s <= self.settings.detections_max_age_s + 1e-6
        boxes = self.boxes_px if fresh else np.zeros((0, 4))
        return agents_from_boxes(boxes, self.camera, self.settings)

    def detect(self, observation: Observation) -> None:
        """The planner's detection answer on this frame, kept for the plans that follow."""
        answer = self.planner.detect(observation.image_rgb, detection_user_text(), self.detect_max_tokens)
        self.boxes_px, self.detections = np.asarray(answer.boxes_px).reshape(-1, 4), self.detections + 1
        self.boxes_time_s = observation.time_s

    def counters(self) -> dict:
        """The model's counters, plus the detection cadence, detections run and the scorer's choices."""
        return super().counters() | {
            "detect_every": self.detect_every,
            "detections": self.detections,
            "scorer_changed_candidate": self.scorer_changed,
            "scorer_dropped_colliding_greedy": self.colliding_greedy_dropped,
            "scorer_stopped": self.stops,
        }


@dataclass(frozen=True)
class ModelPolicySource:
    """A checkpoint (None: the bundled model) as a closed-loop policy, built where ``policy`` is called: it
    pickles, so a spawned worker loads its own copy. The greedy plan, or with ``scored`` the planner node's
    4 candidates (candidate 0 greedy, the others sampled) and the scorer's pick; ``threads`` caps torch's
    threads in the process that builds it; ``commit_rule`` is the decoder's (``DecodeConfig``'s default when
    None)."""

    checkpoint: str | None = None
    scored: bool = False
    camera: Camera = field(default_factory=Camera)
    block_size: int = 32
    steps: int = 8
    detect_every: int = DETECT_EVERY_PLANS
    device: str = "cpu"
    threads: int | None = None
    commit_rule: str | None = None
    smoothing: float = 0.0  # the planner's plan smoother (``decoding.smoothing``; 0: the decoded waypoints)
    scorer_stop: bool = True  # ``scored``: the scorer's stop when every candidate hits a detected vehicle

    def policy(self) -> ModelPolicy:
        if self.threads:
            torch.set_num_threads(self.threads)
        if not self.scored:
            return ModelPolicy(self._planner(self._decode_config()))
        planner = self._planner(self._decode_config(candidates=4, temperature=0.7, greedy_first=True))
        settings = ScorerSettings(stop_when_blocked=self.scorer_stop)
        return ScoredModelPolicy(planner, self.camera, detect_every=self.detect_every, settings=settings)

    def sampling(self, candidates: int, temperature: float) -> ModelPolicy:
        """The same model sampling ``candidates`` plans at ``temperature`` (its ``candidates`` are what
        ``eval trace --samples`` shows beside the driven plan)."""
        return ModelPolicy(self._planner(self._decode_config(candidates=candidates, temperature=temperature)))

    def _decode_config(self, **sampling) -> DecodeConfig:
        # The default budget (128 tokens): a padded plan that reaches 100 m needs more than 96.
        shape = {"block_size": self.block_size, "steps": self.steps, "grammar": True}
        if self.commit_rule:
            shape["commit_rule"] = self.commit_rule
        return DecodeConfig(**shape, **sampling)

    def __call__(self) -> PolicyFactory:
        """The policy's factory (what ``generate_dagger`` builds in each process)."""
        return model_policy_factory(self.policy())

    def _planner(self, config: DecodeConfig) -> Planner:
        return Planner.from_settings(
            config, checkpoint=self.checkpoint, device=self.device, smoothing=self.smoothing
        )


def closed_loop_report(
    names: list[str],
    seeds: list[int],
    config: ClosedLoopConfig,
    checkpoint: str | None = None,
    block_size: int = 32,
    steps: int = 8,
    detect_every: int | None = None,
    kind: str | None = None,
    progress: bool = True,
    workers: int = 1,
    commit_rule: str | None = None,
    smoothing: float = 0.0,
    scorer_stop: bool = True,
) -> dict:
    """``evaluate_closed_loop`` of the named policies (baselines, ``model``, ``model-scored``) on ``seeds``,
    each model policy's report with its checkpoint and counters (decoded with ``commit_rule``; None: the
    decoder's default; plans smoothed with weight ``smoothing``, ``decoding.smoothing``; ``scorer_stop``:
    the scorer may drive its own stop, ``ScorerSettings.stop_when_blocked``; ``detect_every``: plans between
    detection answers, None: ``DETECT_EVERY_PLANS``). ``workers`` > 1:
    that many spawned CPU processes of one thread drive the episodes side by side (each model policy loaded
    once per process; an episode's result does not depend on which process drove it, or after which
    episode)."""
    from wamdiff2_ros.eval.baselines import baseline_factory
    from wamdiff2_ros.eval.closed_loop import closed_loop_report_of, evaluate_closed_loop

    sources = {
        n: ModelPolicySource(
            checkpoint,
            n == "model-scored",
            config.camera,
            block_size,
            steps,
            DETECT_EVERY_PLANS if detect_every is None else detect_every,
            commit_rule=commit_rule,
            smoothing=smoothing,
            scorer_stop=scorer_stop,
        )
        for n in names
        if n.startswith("model")
    }
    models = {name: source.policy() for name, source in sources.items()}
    if workers <= 1:
        factories = {n: baseline_factory(n) for n in names if not n.startswith("model")}
        factories |= {name: model_policy_factory(policy) for name, policy in models.items()}
        report = evaluate_closed_loop(factories, seeds, config, kind, progress)
    else:
        from tqdm import tqdm

        jobs = [(name, seed, config, kind, sources.get(name)) for name in names for seed in seeds]
        rows: dict[str, list[dict]] = {name: [] for name in names}
        context = multiprocessing.get_context("spawn")  # a model's threads do not survive a fork
        with context.Pool(workers) as pool:
            done = pool.imap(_episode_job, jobs)
            for (name, *_), (row, tallies) in tqdm(
                zip(jobs, done, strict=True),
                total=len(jobs),
                desc="episodes",
                unit="episode",
                disable=not progress,
            ):
                rows[name].append(row)
                if name in models:
                    models[name].add_tallies(tallies)
        report = closed_loop_report_of(seeds, kind, rows)
    for name, policy in models.items():
        report["policies"][name] |= {"source": policy.planner.loaded.source, **policy.counters()}
    return report


_worker_models: dict[str, ModelPolicy] = {}  # a worker process's model policies, loaded by their first job


def _episode_job(job: tuple) -> tuple[dict, dict[str, int]]:
    """One episode in a worker: its row and the tallies its model policy (if any) added."""
    from wamdiff2_ros.eval.baselines import baseline_factory
    from wamdiff2_ros.eval.closed_loop import episode_row
    from wamdiff2_ros.sim.closed_loop import run_episode

    name, seed, config, kind, source = job
    if source is None:
        return episode_row(run_episode(seed, baseline_factory(name), config, kind)), {}
    if name not in _worker_models:
        _worker_models[name] = replace(source, threads=1).policy()
    return counted_episode(_worker_models[name], seed, config, kind)


def counted_episode(
    policy: ModelPolicy,
    seed: int,
    config: ClosedLoopConfig,
    kind: str | None = None,
    factory: PolicyFactory | None = None,
) -> tuple[dict, dict[str, int]]:
    """One episode of a loaded policy (a worker's serves many): its row and the tallies it added.
    ``factory`` hands the policy to the episode (``model_policy_factory``'s when None; a probe's may give
    it the live scene first)."""
    from wamdiff2_ros.eval.closed_loop import episode_row
    from wamdiff2_ros.sim.closed_loop import run_episode

    before = policy.tallies()
    row = episode_row(run_episode(seed, factory or model_policy_factory(policy), config, kind))
    return row, {key: count - before[key] for key, count in policy.tallies().items()}


def model_policy_factory(policy: ModelPolicy) -> PolicyFactory:
    """A factory that hands the same loaded policy to every episode (it does not read the scene), started
    afresh, so that an episode's result does not depend on the episodes before it."""

    def factory(scene: Scene) -> ModelPolicy:
        policy.start_episode()
        return policy

    return factory


def model_dagger_data(
    out_dir: Path,
    samples: int,
    *,
    checkpoint: str | None = None,
    seed: int = 0,
    width: int = 640,
    stride_s: float = 1.0,
    route_m: float = 400.0,
    max_s: float = 20.0,
    plan_hz: float = 2.0,
    block_size: int = 32,
    steps: int = 8,
    device: str = "cpu",
    workers: int = 1,
    progress: bool = True,
    first_sample_s: float = 1.0,
    label_last_states: bool = False,
    highway_events_only: bool = False,
    scene_kind: str | None = None,
    command_rule: str | None = None,
    plan_frame: str | None = None,
) -> dict:
    """DAgger data (``sim.dagger``) from a checkpoint (None: the bundled model) driving its greedy plans, in
    the model's own number style, its prompts written in ``command_rule`` (None: the rule the model reads,
    which it drives on either way); ``generate``'s summary. ``workers`` > 1: that
    many CPU processes of one thread each drive episodes side by side (``device`` is then ignored: a tiny
    model's plan is bound by the host, and 16 cores plan faster than one GPU stream). ``first_sample_s``,
    ``label_last_states``, ``highway_events_only`` and ``scene_kind`` as ``GenerateConfig`` says;
    ``plan_frame``: the frame of the expert's answers (None: the model's own)."""
    from wamdiff2_ros.model.checkpoint import read_command_rule, read_plan_frame
    from wamdiff2_ros.model.prompt import MIN_INT_DIGITS_KEY
    from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig
    from wamdiff2_ros.sim.dagger import generate_dagger
    from wamdiff2_ros.sim.dataset import GenerateConfig

    camera = Camera().scaled_to_width(width)
    device, threads = ("cpu", 1) if workers > 1 else (device, None)
    source = ModelPolicySource(checkpoint, False, camera, block_size, steps, device=device, threads=threads)
    folder = Path(checkpoint or default_model_dir())
    config = GenerateConfig(
        out_dir=Path(out_dir),
        samples=samples,
        seed=seed,
        camera=camera,
        stride_s=stride_s,
        min_int_digits=json.loads((folder / "config.json").read_text()).get(MIN_INT_DIGITS_KEY, 1),
        command_rule=command_rule or read_command_rule(folder),
        plan_frame=plan_frame or read_plan_frame(folder),
        first_sample_s=first_sample_s,
        label_last_states=label_last_states,
        highway_events_only=highway_events_only,
        scene_kind=scene_kind,
    )
    loop = ClosedLoopConfig(route_length_m=route_m, max_duration_s=max_s, plan_hz=plan_hz, camera=camera)
    return generate_dagger(config, source, loop, progress, workers)
