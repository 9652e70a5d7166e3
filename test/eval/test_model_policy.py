"""The model as a closed-loop policy: `wamdiff2 eval closed-loop --policy model` (and `model-scored`, the
planner and scorer together) drives an episode through Planner.plan (tiny random weights: the plans are
meaningless, the plumbing is what is checked)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from wamdiff2_ros.cli.main import main
from wamdiff2_ros.eval.model_policy import (
    ModelPolicySource,
    ScoredModelPolicy,
    closed_loop_report,
    model_policy_factory,
)
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.checkpoint import save_checkpoint
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, Observation


@pytest.mark.slow
def test_model_policy_drives_a_closed_loop_episode(tiny_model, tokenizer, tmp_path):
    checkpoint = save_checkpoint(tiny_model, tmp_path / "tiny", tokenizer, pixels=(3136, 12544))
    argv = ["eval", "closed-loop", "--policy", "model", "--policy", "model-scored", "--policy"]
    argv += ["constant-velocity", "--model"]
    argv += [str(checkpoint), "--episodes", "1", "--max-s", "2", "--block-size", "8", "--steps", "4"]
    argv += ["--detect-every", "2"]
    assert main([*argv, "--image-width", "192", "--out", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    model = report["policies"]["model"]
    assert model["source"] == str(checkpoint) and model["plans"] >= 4  # 2 Hz for 2 s
    assert model["forwards_per_plan"] > 1 and 0 <= model["fallbacks"] <= model["plans"]
    assert model["summary"]["episodes"] == 1 and "constant-velocity" in report["policies"]
    scored = report["policies"]["model-scored"]  # the planner and scorer nodes' pair
    assert scored["detections"] >= 1 and 0 <= scored["scorer_changed_candidate"] <= scored["plans"]
    assert 0 <= scored["scorer_dropped_colliding_greedy"] <= scored["scorer_changed_candidate"]


class _Planner:
    """Stands in for Planner: one straight candidate per plan, one box per detection (counted)."""

    def __init__(self) -> None:
        self.detections = 0
        self.loaded = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace()))
        self.plan_frame = "ego"

    def plan(self, inputs):
        candidate = SimpleNamespace(waypoints_ego=np.stack([np.arange(1, 9) * 2.0, np.zeros(8)], 1))
        return SimpleNamespace(candidates=[candidate], decode=SimpleNamespace(forwards=3))

    def detect(self, image, text, max_tokens):
        self.detections += 1
        return SimpleNamespace(boxes_px=[[10.0, 10.0, 20.0, 20.0]])


def test_the_scored_policy_starts_each_episode_afresh() -> None:
    # As a node pair started on a new drive: no boxes from the last scene, detections counted from plan 0.
    policy = ScoredModelPolicy(_Planner(), Camera().scaled_to_width(128), detect_every=2)
    factory = model_policy_factory(policy)
    observation = Observation(None, np.array([4.0, 0.0]), np.zeros(2), "straight", 0.0)
    for episode in range(2):
        assert factory(None) is policy and len(policy.boxes_px) == 0
        policy(observation)
        assert policy.detections == episode and len(policy.boxes_px) == 0  # plan 1 of the episode: none yet
        policy(observation)
        assert len(policy.boxes_px) == 1  # after plan 2
        policy(observation)  # plan 3: episode-local count, no detection
    assert policy.counters()["plans"] == 6 and policy.counters()["detections"] == 2
    assert policy.counters()["detect_every"] == 2  # the report says which cadence made it


def test_the_scored_policy_stops_for_a_fresh_box_and_ignores_an_old_one() -> None:
    # The scorer node drops detections older than detections.max_age_s (1 s): so does the closed loop.
    camera = Camera().scaled_to_width(128)
    (u, v) = camera.project_ego(np.array([[8.0, 0.0, 0.0]]))[0]
    planner = _Planner()
    planner.detect = lambda *args: SimpleNamespace(boxes_px=[[u - 5.0, v - 5.0, u + 5.0, v]])
    policy = ScoredModelPolicy(planner, camera, detect_every=1)
    at = lambda time_s: Observation(None, np.array([4.0, 0.0]), np.zeros(2), "straight", time_s)  # noqa: E731
    straight = policy(at(0.0))  # no boxes yet; the car is detected after this plan
    assert straight[-1, 0] == pytest.approx(16.0) and policy.stops == 0
    stopped = policy(at(0.5))  # the greedy plan runs into the car seen 0.5 s ago: the scorer's stop
    assert policy.stops == 1 and stopped[-1, 0] < 8.0 - 2.5
    policy.boxes_time_s = -2.0  # the same box, seen 2.5 s before the next plan
    assert policy(at(0.5))[-1, 0] == pytest.approx(16.0) and policy.stops == 1


@pytest.mark.slow
def test_workers_drive_the_episodes_one_process_drives(tiny_model, tokenizer, tmp_path):
    checkpoint = str(save_checkpoint(tiny_model, tmp_path / "tiny", tokenizer, pixels=(3136, 12544)))
    config = ClosedLoopConfig(max_duration_s=2.0, camera=Camera().scaled_to_width(128))
    names = ["expert", "model-scored"]
    one, two = (
        closed_loop_report(names, [3, 4], config, checkpoint, 8, 4, 2, progress=False, workers=workers)
        for workers in (1, 2)
    )
    for name in names:
        assert one["policies"][name]["episodes"] == two["policies"][name]["episodes"]
    counters = ("plans", "detections", "forwards_per_plan", "scorer_changed_candidate")
    assert all(one["policies"]["model-scored"][c] == two["policies"]["model-scored"][c] for c in counters)


def test_a_model_policy_decodes_with_the_commit_rule_it_is_given(tiny_model, tokenizer, tmp_path):
    checkpoint = str(save_checkpoint(tiny_model, tmp_path / "tiny", tokenizer, pixels=(3136, 12544)))
    default = ModelPolicySource(checkpoint, block_size=8, steps=4).policy()
    sequential = ModelPolicySource(checkpoint, block_size=8, steps=4, commit_rule="sequential").policy()
    assert default.planner.config.commit_rule == "low_confidence_dynamic"
    assert sequential.planner.config.commit_rule == "sequential"
