"""Evaluation end to end on a small generated dataset and a few episodes, through the CLI as users run it."""

import json

import numpy as np
import pytest

from wamdiff2_ros.cli.main import main
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.baselines import constant_velocity_waypoints
from wamdiff2_ros.eval.open_loop import (
    evaluate_open_loop,
    load_predictions,
    load_truth,
    score_detections,
    score_planner,
    score_qa,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    assert (
        main(
            [
                "sim",
                "generate",
                "--out",
                str(out),
                "--samples",
                "30",
                "--seed",
                "2",
                "--width",
                "192",
                "--workers",
                "2",
            ]
        )
        == 0
    )
    return out


def test_expert_is_perfect_and_constant_velocity_is_worse(dataset):
    planners = evaluate_open_loop(dataset)["planners"]
    expert, cv = planners["expert"], planners["constant-velocity"]
    assert expert["ade_m"] == 0.0 and expert["collision_rate"] == 0.0 and expert["no_collision"] == 1.0
    assert expert["pdm_score"] > 0.9
    assert cv["ade_m"] > 0.5 and cv["pdm_score"] < expert["pdm_score"]
    assert np.all(np.diff(cv["l2_per_waypoint_m"]) >= 0)  # constant velocity drifts further with time


def test_expert_beats_constant_velocity_most_where_the_road_turns(dataset):
    truth = load_truth(dataset)
    turning = {k: t for k, t in truth.items() if t.command != "straight" or abs(t.waypoints_ego[-1, 1]) > 2.0}
    assert turning, "the seed should include junction turns or curves"
    cv = score_planner(
        turning, {k: constant_velocity_waypoints(t.velocity_ego_mps) for k, t in turning.items()}
    )
    overall = score_planner(
        truth, {k: constant_velocity_waypoints(t.velocity_ego_mps) for k, t in truth.items()}
    )
    assert cv["fde_m"] > overall["fde_m"]


def test_predictions_file_in_the_reference_format_is_scored(dataset, tmp_path):
    records = json.loads((dataset / "planning.json").read_text())
    for record in records:  # a planner that answers the expert's waypoints shifted 1 m left
        numbers = [float(v) for v in record["conversations"][1]["value"].split(",")]
        record["conversations"][1]["value"] = ",".join(f"{v + (k % 2):.2f}" for k, v in enumerate(numbers))
    path = tmp_path / "shifted.json"
    path.write_text(json.dumps(records))
    report = score_planner(load_truth(dataset), load_predictions(path))
    assert report["ade_m"] == pytest.approx(1.0, abs=0.01) and report["missing"] == 0


def test_unmatched_predictions_are_refused(dataset):
    with pytest.raises(InputError, match="no prediction matches"):
        score_planner(load_truth(dataset), {"nope": np.zeros((8, 2))})


def test_open_loop_cli_writes_report_and_plots(dataset, tmp_path, capsys):
    args = [
        "eval",
        "open-loop",
        "--data",
        str(dataset),
        "--out",
        str(tmp_path),
        "--plots",
        "2",
        "--detections",
        str(dataset / "detection.json"),
        "--answers",
        str(dataset / "qa.json"),
    ]
    assert main(args) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["planners"]) == {"expert", "constant-velocity"}
    assert report["qa"]["exact_match"] == 1.0 and report["detection"]["ap50"] == pytest.approx(1.0)
    assert (tmp_path / "l2_per_waypoint.png").stat().st_size > 0
    assert len(list(tmp_path.glob("trajectories_*.png"))) == 2
    assert "pdm_score" in capsys.readouterr().out


def test_closed_loop_cli_reports_driving_scores(tmp_path):
    args = [
        "eval",
        "closed-loop",
        "--episodes",
        "1",
        "--seed",
        "7",
        "--kind",
        "highway",
        "--route-m",
        "60",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    policies = json.loads((tmp_path / "report.json").read_text())["policies"]
    assert policies["expert"]["summary"]["driving_score"] == 1.0
    assert policies["expert"]["summary"]["failure_modes"] == {"completed": 1}
    row = policies["constant-velocity"]["episodes"][0]
    assert row["driving_score"] <= row["route_completion"]


def test_reference_detection_answers_score_full_ap50_through_the_parser(dataset):
    report = score_detections(dataset, dataset / "detection.json")  # answers on the 0..1000 scale
    assert report["ap50"] == pytest.approx(1.0) and report["map"] > 0.8  # rounding to 1/1000 of the image
    assert report["unparsed"] == 0 and report["missing"] == 0
    bands = report["by_distance"]  # every truth box in exactly one band; near boxes are found too
    assert list(bands) == ["0-15 m", "15-30 m", "30-60 m", "60+ m"]
    assert sum(band["truth_boxes"] for band in bands.values()) == report["truth_boxes"]
    assert all(band["ap50"] > 0.9 for band in bands.values() if band["truth_boxes"] >= 5)


def test_broken_detection_answers_count_as_no_boxes(dataset, tmp_path):
    records = json.loads((dataset / "detection.json").read_text())
    for record in records:
        record["conversations"][1]["value"] = "I see some cars"
    (tmp_path / "broken.json").write_text(json.dumps(records))
    report = score_detections(dataset, tmp_path / "broken.json")
    assert report["unparsed"] == len(records) and report["map"] == 0.0


def test_qa_exact_match_of_reference_and_of_a_constant_answer(dataset, tmp_path):
    assert score_qa(dataset, dataset / "qa.json")["exact_match"] == 1.0
    records = json.loads((dataset / "qa.json").read_text())
    for record in records:
        record["conversations"][1]["value"] = "No."
    (tmp_path / "no.json").write_text(json.dumps(records))
    result = score_qa(dataset, tmp_path / "no.json")
    expected = sum(
        r["value"] == "no"
        for r in (rec["conversations"][1] for rec in json.loads((dataset / "qa.json").read_text()))
    )
    assert result["exact_match"] == pytest.approx(expected / len(records)) and result["missing"] == 0


@pytest.mark.parametrize(
    ("end", "heading", "standstill", "mode"),
    [
        ("collision", 10.0, 0.0, "collision_same_direction"),
        ("collision", 90.0, 0.0, "collision_crossing"),
        ("collision", 175.0, 0.0, "collision_oncoming"),
        ("timeout", None, 2.0, "timeout"),
        ("timeout", None, 6.0, "stall"),
        ("route_deviation", None, 0.0, "route_deviation"),
    ],
)
def test_failure_modes_tell_collisions_apart_by_heading_and_stalls_by_standing_still(
    end, heading, standstill, mode
):
    from wamdiff2_ros.eval.closed_loop import failure_mode, summarise
    from wamdiff2_ros.sim.closed_loop import EpisodeResult

    result = EpisodeResult(
        0, "highway", 0.5, int(end == "collision"), 0, end, 10.0, np.zeros((2, 2)), heading, standstill
    )
    assert failure_mode(result) == mode
    row = {"kind": "highway", "driving_score": 0.5, "route_completion": 0.5, "collisions": 0,
           "off_road_events": 0, "end_reason": end, "failure_mode": mode}  # fmt: skip
    summary = summarise([row, row])
    assert summary["failure_modes"] == {mode: 2} and summary["failure_modes_by_kind"] == {
        "highway": {mode: 2}
    }


def test_a_failure_the_expert_has_on_the_same_seed_is_counted_as_the_scenes():
    from wamdiff2_ros.eval.closed_loop import closed_loop_report_of

    def row(seed, mode):
        scores = {"driving_score": 0.5, "route_completion": 0.5, "collisions": 0, "off_road_events": 0}
        return {"seed": seed, "kind": "highway", "end_reason": "timeout", "failure_mode": mode, **scores}

    rows = {
        "expert": [row(1, "stall"), row(2, "completed"), row(3, "completed")],
        "model": [row(1, "stall"), row(2, "stall"), row(3, "completed")],
    }
    policies = closed_loop_report_of([1, 2, 3], None, rows)["policies"]
    assert policies["model"]["summary"]["failure_modes"] == {"completed": 1, "stall": 2}
    assert policies["model"]["summary"]["failure_modes_expert_too"] == {"stall": 1}
    assert policies["expert"]["summary"]["failure_modes_expert_too"] == {"stall": 1}
    assert (
        "failure_modes_expert_too"
        not in closed_loop_report_of([1], None, {"m": rows["model"][:1]})["policies"]["m"]["summary"]
    )


def test_a_probe_policys_report_sums_the_tallies_of_its_episodes(tmp_path):
    from wamdiff2_ros.eval.closed_loop import policy_report_of, save_policy_report

    def row(seed):
        scores = {"driving_score": 1.0, "route_completion": 1.0, "collisions": 0, "off_road_events": 0}
        ending = {"end_reason": "completed", "failure_mode": "completed"}
        return {"seed": seed, "kind": "highway", **ending, **scores}

    results = [(row(1), {"plans": 3, "forwards": 60}), (row(2), {"plans": 2, "forwards": 44})]
    report = policy_report_of([1, 2], "highway", "probe", results, "models/default")
    entry = report["policies"]["probe"]
    assert report["seeds"] == [1, 2] and report["kind"] == "highway"
    assert entry["tallies"] == {"plans": 5, "forwards": 104} and entry["source"] == "models/default"
    assert [e["seed"] for e in entry["episodes"]] == [1, 2] and entry["summary"]["episodes"] == 2
    printed = save_policy_report(str(tmp_path / "report.json"), report, "probe")
    assert json.loads((tmp_path / "report.json").read_text()) == report and "episodes" not in printed
