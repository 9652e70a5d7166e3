"""``eval predict`` decodes a checkpoint over a generated dataset into the files ``eval open-loop`` scores,
and ``eval paired`` compares two planners sample by sample."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from wamdiff2_ros.cli.main import main as cli_main
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.paired import episode_scores, failure_changes, paired_difference, paired_ratio
from wamdiff2_ros.eval.predict import ITEM_SCORES, SAMPLED_ANSWERS
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.checkpoint import read_command_rule, read_plan_frame
from wamdiff2_ros.model.default import default_model_dir
from wamdiff2_ros.sim.dataset import GenerateConfig, generate


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generated")
    rule = read_command_rule(default_model_dir())  # written in the rule the model reads
    frame = read_plan_frame(default_model_dir())  # and in the frame it plans in
    camera = Camera().scaled_to_width(192)
    config = GenerateConfig(folder, samples=3, seed=7, camera=camera, command_rule=rule, plan_frame=frame)
    generate(config, progress=False)
    return folder


def test_predicted_plans_and_detections_are_what_open_loop_scores(generated, tmp_path, capsys) -> None:
    model = str(default_model_dir())
    plans, boxes = tmp_path / "plans.json", tmp_path / "detections.json"
    assert cli_main(["eval", "predict", model, str(generated), str(plans), "--steps", "8"]) == 0
    answers = json.loads(plans.read_text())
    assert sorted(answers) == sorted(r["id"] for r in json.loads((generated / "planning.json").read_text()))
    summary = json.loads((tmp_path / "plans.json.summary.json").read_text())
    assert summary["samples"] == 3 and summary["grammar"] and summary["forwards_per_answer"] >= 1
    arguments = [model, str(generated), str(boxes), "--task", "detection", "--samples", "1"]
    assert cli_main(["eval", "predict", *arguments, "--candidates", "2"]) == 0
    (record,) = json.loads(boxes.read_text())  # the task file's record, its answer replaced
    assert record["conversations"][-1]["from"] == "gpt"
    items = record["conversations"][-1]["value"].count("{")  # and a score for each of its items
    assert len(record[ITEM_SCORES]) == items and all(0 < s <= 1 for s in record[ITEM_SCORES])
    (sampled,) = record[SAMPLED_ANSWERS]  # the second answer, sampled, beside it
    assert len(sampled[ITEM_SCORES]) == sampled["text"].count("{")
    report = tmp_path / "report"
    scored = ["--data", str(generated), "--predictions", f"default={plans}", "--detections", str(boxes)]
    assert cli_main(["eval", "open-loop", *scored, "--out", str(report), "--plots", "0"]) == 0
    planners = json.loads((report / "report.json").read_text())["planners"]
    assert np.isfinite(planners["default"]["ade_m"])
    smoothed = tmp_path / "smoothed"  # the same plans as a smoothing planner node would publish them
    assert (
        cli_main(["eval", "open-loop", *scored, "--smoothing", "1", "--out", str(smoothed), "--plots", "0"])
        == 0
    )
    again = json.loads((smoothed / "report.json").read_text())["planners"]
    assert again["default"]["ade_m"] != planners["default"]["ade_m"]
    assert again["expert"] == planners["expert"]  # the baselines are scored as they are
    # The same predictions on both sides: ratio 1 with a degenerate interval.
    paired = tmp_path / "paired.json"
    pair = f"{generated}={plans}"
    assert cli_main(["eval", "paired", "--reference", pair, "--planner", pair, "--out", str(paired)]) == 0
    result = json.loads(paired.read_text())
    assert result["samples"] == 3 and result["ratio"] == result["low"] == result["high"] == 1.0


def test_paired_ratio_resamples_the_same_samples_on_both_sides() -> None:
    reference = np.random.default_rng(0).uniform(0.5, 3.0, 40)
    result = paired_ratio(2.0 * reference, reference, resamples=200)
    assert result["ratio"] == pytest.approx(2.0)
    assert result["low"] == pytest.approx(2.0) and result["high"] == pytest.approx(2.0)  # paired: no spread
    noisy = reference + np.random.default_rng(1).normal(0.0, 0.3, 40)
    spread = paired_ratio(noisy, reference, resamples=200)
    assert spread["low"] < spread["ratio"] < spread["high"]
    with pytest.raises(ValueError, match="paired samples"):
        paired_ratio(reference[:3], reference)


def _report(path, policy: str, scores: dict[int, float]):
    episodes = [{"seed": seed, "driving_score": score} for seed, score in scores.items()]
    path.write_text(json.dumps({"policies": {policy: {"summary": {}, "episodes": episodes}}}))
    return path


def test_paired_drive_compares_the_same_seeds_of_two_reports(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    reference = {seed: float(rng.uniform(0.2, 1.0)) for seed in range(1000, 1040)}
    better = {seed: min(1.0, score + 0.1) for seed, score in reference.items()}
    first = _report(tmp_path / "a.json", "model", reference)
    # listed in another order: episodes pair by seed
    second = _report(tmp_path / "b.json", "model-scored", dict(reversed(better.items())))
    out = tmp_path / "paired.json"
    arguments = ["--reference", f"{first}:model", "--planner", f"{second}:model-scored", "--out", str(out)]
    assert cli_main(["eval", "paired-drive", *arguments]) == 0
    result = json.loads(out.read_text())
    assert result["planner"] == f"{second}:model-scored" and result["reference"] == f"{first}:model"
    expected = np.mean([better[s] - reference[s] for s in reference])
    assert result["episodes"] == 40 and result["difference"] == pytest.approx(expected)
    assert 0.0 < result["low"] <= result["difference"] <= result["high"] <= 0.1 + 1e-12
    assert "difference +0.0" in capsys.readouterr().out


def test_paired_drive_pools_reports_of_disjoint_seeds(tmp_path) -> None:
    held_out, fresh = {1000: 0.5, 1001: 0.7}, {2000: 0.2, 2001: 0.4}
    reports = [
        _report(tmp_path / f"{name}.json", "model", scores)
        for name, scores in (("h", held_out), ("f", fresh))
    ]
    better = [
        _report(tmp_path / f"{name}2.json", "model", {s: v + 0.1 for s, v in scores.items()})
        for name, scores in (("h", held_out), ("f", fresh))
    ]
    out = tmp_path / "pooled.json"
    arguments = [
        "--reference",
        *(f"{r}:model" for r in reports),
        "--planner",
        *(f"{r}:model" for r in better),
    ]
    assert cli_main(["eval", "paired-drive", *arguments, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["episodes"] == 4 and result["difference"] == pytest.approx(0.1)
    assert result["reference"] == f"{reports[0]}:model + {reports[1]}:model"
    with pytest.raises(InputError, match="repeats seeds"):
        cli_main(
            [
                "eval",
                "paired-drive",
                "--reference",
                f"{reports[0]}:model",
                f"{better[0]}:model",
                "--planner",
                f"{reports[0]}:model",
            ]
        )


def test_failure_changes_count_modes_kinds_and_what_each_failure_became() -> None:
    def episode(kind: str, score: float, mode: str) -> dict:
        return {"kind": kind, "driving_score": score, "failure_mode": mode}

    highway = episode("highway", 1.0, "completed")
    reference = {1: episode("roundabout", 0.3, "stall"), 2: episode("roundabout", 0.2, "stall"), 3: highway}
    planner = {1: episode("roundabout", 0.1, "collision_crossing"), 2: episode("roundabout", 0.4, "stall")}
    planner[3] = highway
    result = failure_changes(planner, reference)
    assert result["by_kind"]["roundabout"] == pytest.approx(
        {"episodes": 2, "score": 0.25, "reference_score": 0.25}
    )
    assert result["failure_modes"]["stall"] == {"planner": 1, "reference": 2}
    assert result["failure_modes"]["collision_crossing"] == {"planner": 1, "reference": 0}
    assert result["changes"] == {"stall -> collision_crossing": 1}


def test_paired_difference_needs_the_same_episodes(tmp_path) -> None:
    with pytest.raises(InputError, match="the same episodes"):
        paired_difference({1: 0.5, 2: 0.4}, {1: 0.5, 3: 0.4})
    with pytest.raises(InputError, match="has no policy 'expert'"):
        episode_scores(_report(tmp_path / "a.json", "model", {1: 0.5}), "expert")


def test_predict_refuses_data_of_another_command_rule(generated, tmp_path) -> None:
    data = tmp_path / "data"
    shutil.copytree(generated, data)
    (data / "navigation.json").write_text('{"command_rule": "heading"}')
    with pytest.raises(InputError, match="command rule"):
        cli_main(["eval", "predict", str(default_model_dir()), str(data), str(tmp_path / "out.json")])


def test_predict_refuses_data_of_another_plan_frame(generated, tmp_path) -> None:
    data = tmp_path / "data"
    shutil.copytree(generated, data)
    navigation = json.loads((data / "navigation.json").read_text())
    other = "route_offset" if navigation["plan_frame"] != "route_offset" else "ego"
    (data / "navigation.json").write_text(json.dumps(navigation | {"plan_frame": other}))
    with pytest.raises(InputError, match="frame"):
        cli_main(["eval", "predict", str(default_model_dir()), str(data), str(tmp_path / "out.json")])
