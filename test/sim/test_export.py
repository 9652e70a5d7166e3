"""Records round-trip through the reference JSON format; generation is deterministic per seed."""

import json
import re

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.parse import boxes_to_source_px, parse_detections, parse_waypoints
from wamdiff2_ros.model.plan_frame import plan_to_ego
from wamdiff2_ros.model.prompt import planning_user_text
from wamdiff2_ros.sim import export
from wamdiff2_ros.sim.dataset import (
    GenerateConfig,
    generate,
    load_command_rule,
    load_plan_frame,
    standing_start,
)
from wamdiff2_ros.sim.expert import AgentFutures, GroundTruth
from wamdiff2_ros.training.data import load_records

TRUTH = GroundTruth(
    command="left",
    velocity_ego_mps=np.array([4.66, -0.09]),
    accel_ego_mps2=np.array([0.17, -1.53]),
    waypoints_ego=np.stack([np.arange(1, 9) * 2.0, np.arange(1, 9) * 0.25], axis=1),
    agents=AgentFutures(np.full((1, 8, 3), np.nan), np.array([[10.0, 0.0, 0.0]]), np.array([[5.0, 2.0]])),
    drivable_ego=(np.array([[-10.0, -2.0], [50.0, -2.0], [50.0, 2.0], [-10.0, 2.0]]),),
    boxes_px=np.array([[10.4, 20.6, 30.0, 40.0]]),
    labels=("car",),
    qa=(("Is there a vehicle ahead in the ego lane within 30 meters? Answer yes or no.", "yes"),),
)


def test_planning_record_has_the_reference_shape_and_prompt():
    rec = json.loads(json.dumps(export.planning_record("s1", "images/s1.png", TRUTH)))
    assert list(rec) == ["datasource", "id", "image", "conversations"]
    assert rec["image"] == ["images/s1.png"]
    human, gpt = rec["conversations"]
    assert human == {"from": "human", "value": planning_user_text("left", [4.66, -0.09], [0.17, -1.53])}
    assert "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)" in human["value"]
    np.testing.assert_allclose(parse_waypoints(gpt["value"]), TRUTH.waypoints_ego, atol=0.005)
    padded = export.planning_record("s1", "images/s1.png", TRUTH, min_int_digits=2)["conversations"][1]
    assert padded["value"].startswith("02.00,00.25,04.00,00.50")


def test_detection_answer_parses_back_with_the_model_parser():
    answer = export.detection_record("s1", "i.png", TRUTH, (200, 100))["conversations"][1]["value"]
    assert json.loads(answer) == [{"bbox_2d": [52, 206, 150, 400], "label": "car"}]  # 0..1000 of 200x100
    boxes_px = boxes_to_source_px(parse_detections(answer), (200, 100))
    np.testing.assert_allclose(boxes_px, TRUTH.boxes_px, atol=0.2)  # within the 1/1000 rounding
    assert export.format_detections(np.zeros((0, 4)), (), (200, 100)) == "[]"


def test_qa_records_have_one_exchange_per_fact():
    (rec,) = export.qa_records("s1", "i.png", TRUTH)
    assert rec["id"] == "s1_qa0" and rec["conversations"][1]["value"] == "yes"
    assert rec["conversations"][0]["value"].startswith("<image>\n")


def test_ground_truth_line_round_trips_with_missing_agents():
    line = json.loads(json.dumps(export.ground_truth_line("s1", "i.png", TRUTH)))
    back = export.ground_truth_from_line(line)
    np.testing.assert_allclose(back.waypoints_ego, TRUTH.waypoints_ego)
    assert np.isnan(back.agents.poses_ego).all() and back.agents.poses_ego.shape == (1, 8, 3)
    np.testing.assert_allclose(back.drivable_ego[0], TRUTH.drivable_ego[0])
    assert back.qa == TRUTH.qa and back.command == "left"


def _generate(out_dir, workers):
    config = GenerateConfig(
        out_dir, samples=12, seed=5, camera=Camera().scaled_to_width(192), workers=workers
    )
    return generate(config, progress=False)


def test_generation_is_deterministic_and_complete(tmp_path):
    summary = _generate(tmp_path / "a", workers=1)
    _generate(tmp_path / "b", workers=2)
    assert summary["samples"] == 12
    for name in ("planning.json", "detection.json", "qa.json", "ground_truth.jsonl", "camera.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    records = json.loads((tmp_path / "a" / "planning.json").read_text())
    assert len(records) == 12 and len({r["id"] for r in records}) == 12
    for rec in records:
        assert (tmp_path / "a" / rec["image"][0]).is_file()
    assert len(json.loads((tmp_path / "a" / "qa.json").read_text())) == 12 * 4
    assert json.loads((tmp_path / "a" / "camera.json").read_text())["intrinsics"]["width_px"] == 192
    assert load_command_rule(tmp_path / "a") == "branch"  # recorded beside the camera
    assert load_command_rule(tmp_path) == "heading"  # a folder without the record: the legacy rule
    assert load_plan_frame(tmp_path / "a") == "ego" and load_plan_frame(tmp_path) == "ego"


def test_answers_along_the_route_read_back_as_the_experts_waypoints(tmp_path):
    """A ``route`` folder's answers are (s, d) along the truth line's route window: converted back as the
    planner converts them, they are the expert's ego-frame waypoints (to the answer's 2 decimals)."""
    config = GenerateConfig(
        tmp_path, samples=12, seed=5, camera=Camera().scaled_to_width(192), workers=1, plan_frame="route",
        scene_kind="roundabout", min_int_digits=2,
    )  # fmt: skip
    generate(config, progress=False)
    assert load_plan_frame(tmp_path) == "route"
    answers = {r["id"]: r["conversations"][-1]["value"] for r in load_json(tmp_path / "planning.json")}
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    turning = 0
    for line in truths:
        truth = export.ground_truth_from_line(line)
        waypoints = plan_to_ego(parse_waypoints(answers[line["id"]]), "route", truth.route_ego_m)
        np.testing.assert_allclose(waypoints, truth.waypoints_ego, atol=0.05)  # 4 m off a corner: 4 cm
        turning += abs(truth.waypoints_ego[-1, 1]) > 2.0
    assert turning  # some of the roundabout's plans turn, their answers do not say so in y


def load_json(path):
    return json.loads(path.read_text())


def test_an_unknown_command_rule_is_refused(tmp_path):
    with pytest.raises(InputError, match="command rule"):
        generate(GenerateConfig(tmp_path, samples=1, command_rule="compass"), progress=False)


def test_zero_samples_is_refused(tmp_path):
    with pytest.raises(InputError, match="positive"):
        generate(GenerateConfig(tmp_path, samples=0), progress=False)


def test_standing_starts_sample_the_expert_moving_off_from_rest(tmp_path):
    config = GenerateConfig(
        tmp_path, samples=6, seed=5, camera=Camera().scaled_to_width(192), workers=1, standing_starts=1.0
    )
    generate(config, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    firsts = [t for t in truths if t["id"].endswith("_t0000")]  # each drive is sampled from t = 0
    assert firsts and len({t["id"].split("_")[0] for t in firsts}) == len(firsts)
    for truth in firsts:
        assert np.hypot(*truth["velocity_ego_mps"]) == 0.0
        assert abs(truth["accel_ego_mps2"][0]) < 5.0  # no jump from the scene's initial speed
    assert any(np.hypot(*t["waypoints_ego"][-1]) > 1.0 for t in firsts)  # the expert moves off


def test_first_sample_s_samples_moving_starts_from_then(tmp_path):
    config = GenerateConfig(
        tmp_path, samples=4, seed=5, camera=Camera().scaled_to_width(128), workers=1, stride_s=0.5,
        first_sample_s=0.0,
    )  # fmt: skip
    generate(config, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    assert [t["id"] for t in truths] == [f"e000000_t{tick:04d}" for tick in (0, 5, 10, 15)]
    assert np.hypot(*truths[0]["velocity_ego_mps"]) > 1.0  # a moving start, not a standing one


def test_scene_kind_makes_every_drive_of_that_kind(tmp_path):
    config = GenerateConfig(
        tmp_path, samples=6, seed=4, camera=Camera().scaled_to_width(64), workers=1, scene_kind="intersection"
    )
    generate(config, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    assert len(truths) == 6 and {t["kind"] for t in truths} == {"intersection"}
    with pytest.raises(InputError, match="scene kind"):
        GenerateConfig(tmp_path, samples=1, scene_kind="parking")
    with pytest.raises(InputError, match="highway events"):
        GenerateConfig(tmp_path, samples=1, scene_kind="roundabout", highway_events_only=True)


def test_standing_starts_are_a_deterministic_fraction_of_the_episodes(tmp_path):
    config = GenerateConfig(tmp_path, samples=1, seed=3, standing_starts=0.3)
    draws = [standing_start(config, episode) for episode in range(2000)]
    assert draws == [standing_start(config, episode) for episode in range(2000)]
    assert 0.26 < sum(draws) / len(draws) < 0.34
    assert not any(standing_start(GenerateConfig(tmp_path, samples=1), e) for e in range(100))


def test_highway_events_only_drives_highways_with_an_event_ahead(tmp_path):
    config = GenerateConfig(
        tmp_path, samples=6, seed=5, camera=Camera().scaled_to_width(128), workers=1, highway_events_only=True
    )
    generate(config, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    assert len(truths) == 6 and {t["kind"] for t in truths} == {"highway"}


def test_the_branch_distance_rule_writes_the_distance_into_prompts_and_truth(tmp_path):
    config = GenerateConfig(
        tmp_path, samples=6, seed=4, camera=Camera().scaled_to_width(64), workers=1,
        scene_kind="intersection", command_rule="branch_distance",
    )  # fmt: skip
    generate(config, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    prompts = {r.id: r.user_text for r in load_records(tmp_path / "planning.json", "planning")}
    assert any(t["command_distance_m"] is not None for t in truths)
    for truth in truths:
        distance = truth["command_distance_m"]
        words = truth["command"] if distance is None else f"{truth['command']} in {round(distance)}m"
        assert f"The navigation information is: {words}\n" in prompts[truth["id"]]
        assert export.ground_truth_from_line(truth).command_distance_m == distance
    assert load_command_rule(tmp_path) == "branch_distance"


def test_the_branch_route_rule_writes_the_routes_shape_into_prompts_and_truth(tmp_path):
    config = GenerateConfig(
        tmp_path, samples=4, seed=4, camera=Camera().scaled_to_width(64), workers=1,
        scene_kind="roundabout", command_rule="branch_route",
    )  # fmt: skip
    generate(config, progress=False)
    truths = [json.loads(line) for line in (tmp_path / "ground_truth.jsonl").read_text().splitlines()]
    prompts = {r.id: r.user_text for r in load_records(tmp_path / "planning.json", "planning")}
    for truth in truths:
        route = export.ground_truth_from_line(truth).route_ahead_m  # rounded to millimetres
        assert route.shape == (4, 2) and truth["command_distance_m"] is None
        told = re.search(r"The navigation information is: (\w+) to \(([-0-9.,]+)\)\n", prompts[truth["id"]])
        assert told[1] == truth["command"] and re.fullmatch(r"-?\d\d\.\d\d(,-?\d\d\.\d\d){7}", told[2])
        np.testing.assert_allclose(np.array(told[2].split(","), float).reshape(4, 2), route, atol=0.0051)
    assert load_command_rule(tmp_path) == "branch_route"
