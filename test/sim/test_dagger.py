"""DAgger data (``sim/dagger.py``): a policy's closed-loop states, labelled with the expert's plan from
each of them, written in ``generate``'s layout."""

from __future__ import annotations

import json

import numpy as np
from policies import constant_velocity, constant_velocity_factory

from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig
from wamdiff2_ros.sim.dagger import episode_samples, generate_dagger
from wamdiff2_ros.sim.dataset import GenerateConfig
from wamdiff2_ros.training.data import load_records

CAMERA = Camera().scaled_to_width(128)
LOOP = ClosedLoopConfig(route_length_m=400.0, max_duration_s=9.0, camera=CAMERA)


def test_the_expert_labels_the_states_a_straight_driving_policy_reaches(tmp_path) -> None:
    config = GenerateConfig(out_dir=tmp_path, samples=4, seed=0, camera=CAMERA)
    # Scene seed 2: a curvy highway that constant velocity drifts off (at 8.5 s, 15 m from the route).
    samples = episode_samples(2, config, constant_velocity, LOOP)
    assert len(samples) == 4  # ticks 10, 20, 30, 40 have a 4 s horizon before the episode ends
    lateral = [np.abs(np.array(s["truth"]["waypoints_ego"])[:, 1]).max() for s in samples]
    # The expert's plans from the drifting states steer back, more the farther the drift went.
    assert lateral[0] > 1.0 and lateral == sorted(lateral) and lateral[-1] > 10.0
    assert all(s["planning"]["id"].startswith("d000002_t") for s in samples)


def test_dagger_data_is_a_generate_folder(tmp_path) -> None:
    config = GenerateConfig(out_dir=tmp_path, samples=3, seed=2, camera=CAMERA)
    summary = generate_dagger(config, constant_velocity_factory, LOOP, progress=False)
    assert summary["samples"] == 3
    records = load_records(tmp_path / "planning.json", "planning")
    assert len(records) == 3 and all(r.image_path.exists() for r in records)
    assert len(json.loads((tmp_path / "detection.json").read_text())) == 3
    assert (tmp_path / "camera.json").exists() and len(
        (tmp_path / "ground_truth.jsonl").read_text().splitlines()
    ) == 3


def test_workers_write_the_samples_one_process_writes(tmp_path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for out, workers in ((one, 1), (two, 2)):
        config = GenerateConfig(out_dir=out, samples=5, seed=2, camera=CAMERA)
        generate_dagger(config, constant_velocity_factory, LOOP, progress=False, workers=workers)
    assert (one / "planning.json").read_text() == (two / "planning.json").read_text()
    assert (one / "ground_truth.jsonl").read_text() == (two / "ground_truth.jsonl").read_text()


def test_last_states_are_labelled_when_asked_so_a_rollout_that_crashes_gives_samples(tmp_path) -> None:
    # Episode 1 of base seed 0 with highway events: constant velocity runs into the braking car ahead
    # within 4 s, so without the option no state of it has a horizon and the rollout gives nothing.
    def samples(**options) -> list[dict]:
        config = GenerateConfig(
            out_dir=tmp_path, samples=4, seed=0, camera=CAMERA, highway_events_only=True, **options
        )
        return episode_samples(1, config, constant_velocity, LOOP)

    assert samples(first_sample_s=0.0, stride_s=0.5) == []
    labelled = samples(first_sample_s=0.0, stride_s=0.5, label_last_states=True)
    ids = [s["planning"]["id"] for s in labelled]
    assert ids[0] == "d000001_t0000" and ids[1] == "d000001_t0005" and len(ids) >= 6
    assert {s["truth"]["kind"] for s in labelled} == {"highway"}
    reach = [float(np.array(s["truth"]["waypoints_ego"])[-1, 0]) for s in labelled]
    speed = float(np.hypot(*labelled[0]["truth"]["velocity_ego_mps"]))
    # Constant velocity keeps its speed; the expert's plans from those states brake, harder near the car.
    assert all(r < 4.0 * speed for r in reach) and reach[-1] < 0.5 * reach[0]


def test_driving_on_keeps_the_log_one_snapshot_a_tick() -> None:
    from wamdiff2_ros.sim.closed_loop import run_episode
    from wamdiff2_ros.sim.dagger import _Labeller
    from wamdiff2_ros.sim.engine import SIM_HZ
    from wamdiff2_ros.sim.expert import HORIZON_TICKS

    labeller = _Labeller(stride_ticks=5, first_tick=0)
    result = run_episode(
        1, constant_velocity, LOOP, kind="highway", observer=labeller, highway_events_only=True
    )
    ended = len(labeller.log)
    labeller.drive_on()
    assert result.end_reason == "collision" and len(labeller.log) == ended + HORIZON_TICKS
    times = [snapshot.time_s for snapshot in labeller.log]
    assert np.allclose(np.diff(times), 1.0 / SIM_HZ)


def test_rollouts_can_be_labelled_in_another_command_rule_than_the_policy_reads(tmp_path) -> None:
    # A round that adds the branch distance starts from a model of the `branch` rule: it drives on its own
    # rule, and the states it reaches get prompts with the distance.
    config = GenerateConfig(
        out_dir=tmp_path, samples=6, seed=4, camera=CAMERA, scene_kind="intersection",
        command_rule="branch_distance",
    )  # fmt: skip
    generate_dagger(config, constant_velocity_factory, LOOP, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    assert any(t["command_distance_m"] is not None for t in truths)
    prompts = [r.user_text for r in load_records(tmp_path / "planning.json", "planning")]
    assert sum(" in " in p.split("\n")[1] for p in prompts) == sum(
        t["command_distance_m"] is not None for t in truths
    )
