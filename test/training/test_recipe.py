"""``wamdiff2 train recipe`` on a CPU-sized recipe: every step kind runs (one training stage stands for the
three: they differ only in their config, which test_stages.py covers), a second run skips finished steps,
``--until`` stops early, and a recipe that refers forward is refused."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.training.recipe import carried_outputs, load_recipe, resume_checkpoints, run_recipe

SHORT = {"max_steps": 2, "global_batch_size": 2, "local_batch_size": 2, "eval_samples": 0, "progress": False}


def _recipe(tmp_path: Path) -> Path:
    recipe = {
        "run_dir": str(tmp_path / "run"),
        "device": "cpu",
        "training": {"num_workers": 0, "max_new_tokens": 96},
        "steps": [
            {"name": "scenes", "kind": "generate", "samples": 4, "seed": 5, "width": 128, "workers": 1},
            {"name": "init", "kind": "init", "layers": 1, "intermediate": 64, "hidden": 64, "vision_depth": 3,
             "vision_hidden": 64},
            {
                "name": "teacher",
                "kind": "train",
                "stage": "sft",
                "config": "config/train_sft_tiny.yaml",
                "model": "init",
                "data": "scenes",
                "heldout": "scenes",
                "set": {**SHORT, "heldout_every_steps": 1, "heldout_samples": 2},
            },
            {"name": "small", "kind": "reduce_vocabulary", "model": "teacher", "vocab_from": ["scenes"]},
            {"name": "packed", "kind": "pack", "model": "small"},
            {"name": "rollouts", "kind": "dagger", "model": "packed", "samples": 2, "seed": 2, "width": 128,
             "max_s": 9.0, "block_size": 8, "steps": 4, "first_sample_s": 0.0, "label_last_states": True},
            {"name": "both", "kind": "merge", "from": ["scenes", "rollouts"], "repeat": {"rollouts": 2}},
            {"name": "metrics", "kind": "evaluate", "model": "packed", "data": "scenes", "samples": 1,
             "block_size": 8, "steps": 4},
            {"name": "metrics_ar", "kind": "evaluate", "model": "packed", "data": "scenes", "samples": 1,
             "block_size": 1, "steps": 1},
            {"name": "driven", "kind": "closed_loop", "model": "packed", "policies": ["expert", "model"],
             "episodes": 1, "seed": 2, "width": 128, "max_s": 3.0, "block_size": 8, "steps": 4,
             "smoothing": 1.0},
            {"name": "bundle", "kind": "bundle", "model": "packed", "to": str(tmp_path / "default"),
             "evaluations": ["metrics", "metrics_ar", "driven"], "reference": "metrics_ar"},
        ],
    }  # fmt: skip
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def test_a_recipe_runs_every_step_and_a_second_run_skips_them(tmp_path) -> None:
    recipe = load_recipe(_recipe(tmp_path))
    lines: list[str] = []
    outputs = run_recipe(recipe, log=lines.append)
    assert list(outputs) == recipe.names and all("finished" in line for line in lines[1::2])
    assert Path(outputs["teacher"]).name == "final" and Path(outputs["teacher"]).parent.name == "B1"
    curve = (tmp_path / "run" / "teacher" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in curve] == ["train", "heldout"] * 2
    merged = json.loads((Path(outputs["both"]) / "planning.json").read_text())
    assert len(merged) == 4 + 2 * 2 and all(Path(item["image"][0]).is_absolute() for item in merged)
    assert merged[4] == merged[5] and merged[6] == merged[7]  # each rollout record twice
    assert merged[4]["id"].endswith("_t0000")  # labelled from the start (first_sample_s: 0)
    assert all(Path(item["image"][0]).exists() for item in merged)
    report = json.loads(Path(outputs["metrics"]).read_text())
    assert report["planners"]["model"]["samples"] == 1 and "detection" in report
    driven = json.loads(Path(outputs["driven"]).read_text())
    assert driven["seeds"] == [2] and driven["policies"]["model"]["plans"] > 0
    assert (Path(outputs["packed"]) / "trainer_state.json").exists()  # the lineage travels with the pack
    bundled = Path(outputs["bundle"])
    assert (bundled / "model.safetensors").read_bytes() == (
        Path(outputs["packed"]) / "model.safetensors"
    ).read_bytes()
    card = (bundled / "MODEL_CARD.md").read_text()
    assert "--until bundle`" in card and "| metrics | 1 |" in card and "| driven: model | 1 |" in card
    assert "- metrics against metrics_ar (1 samples): ADE " in card and "forwards a plan" in card
    vision = json.loads((Path(outputs["init"]) / "config.json").read_text())["vision_config"]
    assert (vision["depth"], vision["hidden_size"], vision["deepstack_visual_indexes"]) == (3, 64, [1, 2])
    run = tmp_path / "run"
    assert (run / "recipe.yaml").exists() and "finished" in (run / "recipe.log").read_text()
    again: list[str] = []
    assert run_recipe(load_recipe(run / "recipe.yaml"), log=again.append) == outputs  # its own copy resumes
    assert len(again) == len(recipe.names) and all("done earlier" in line for line in again)
    # A run folder carried without its data makes again the data a step still to run reads, and only that.
    shutil.rmtree(outputs["scenes"])
    shutil.rmtree(outputs["rollouts"])
    state = json.loads((run / "recipe_state.json").read_text())
    (run / "recipe_state.json").write_text(json.dumps({k: v for k, v in state.items() if k != "metrics"}))
    third: list[str] = []
    run_recipe(recipe, log=third.append)
    remade = [line.split("]")[1].split()[0] for line in third if "finished" in line]
    assert remade == ["scenes", "metrics"] and not Path(outputs["rollouts"]).exists()  # driving reads none


def test_a_step_killed_midway_is_made_again_not_read_as_done(tmp_path, monkeypatch) -> None:
    from wamdiff2_ros.training import recipe as recipe_module

    path = _recipe(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["steps"] = [raw["steps"][0], {"name": "copy", "kind": "merge", "from": ["scenes"]}]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    recipe = load_recipe(path)
    scenes = Path(run_recipe(recipe, until="scenes", log=lambda line: None)["scenes"])
    shutil.rmtree(scenes)  # a run folder carried to a fresh machine without its data

    def killed(step, context):  # the job's time ran out while the data was being written
        context.folder(step).mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setitem(recipe_module.STEPS, "generate", killed)
    with pytest.raises(KeyboardInterrupt):
        run_recipe(recipe, log=lambda line: None)
    monkeypatch.undo()
    assert scenes.exists() and not (scenes / "planning.json").exists()
    lines: list[str] = []
    outputs = run_recipe(recipe, log=lines.append)
    assert [line.split("]")[1].split()[0] for line in lines if "finished" in line] == ["scenes", "copy"]
    assert len(json.loads((Path(outputs["copy"]) / "planning.json").read_text())) == 4


def test_a_dagger_step_labels_in_the_command_rule_it_names(tmp_path, monkeypatch) -> None:
    # A round that adds the branch distance rolls out a model of another rule (it drives on its own).
    from wamdiff2_ros.eval import model_policy

    path = _recipe(tmp_path)
    raw = yaml.safe_load(path.read_text())
    rollouts = {"name": "rollouts", "kind": "dagger", "model": "scenes", "samples": 2, "seed": 2}
    raw["steps"] = [raw["steps"][0], rollouts | {"command_rule": "branch_distance"}]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    calls = []
    monkeypatch.setattr(model_policy, "model_dagger_data", lambda out, samples, **kw: calls.append(kw))
    run_recipe(load_recipe(path), log=lambda line: None)
    assert calls[0]["command_rule"] == "branch_distance" and calls[0]["seed"] == 2


def test_until_stops_after_the_named_step(tmp_path) -> None:
    recipe = load_recipe(_recipe(tmp_path))
    outputs = run_recipe(recipe, tmp_path / "other", until="init", log=lambda line: None)
    assert list(outputs) == ["scenes", "init"]
    with pytest.raises(InputError, match="not a step"):
        run_recipe(recipe, until="nothing", log=lambda line: None)


def test_a_new_run_goes_on_from_a_given_output_running_only_what_the_target_needs(tmp_path) -> None:
    recipe = load_recipe(_recipe(tmp_path))
    elsewhere = run_recipe(recipe, tmp_path / "first", until="init", log=lambda line: None)["init"]
    lines: list[str] = []
    outputs = run_recipe(
        recipe,
        tmp_path / "second",
        until="small",
        given={"teacher": elsewhere},
        only_needed=True,
        log=lines.append,
    )
    # the vocabulary cut reads the teacher (given) and the scenes (made); the random start is not needed
    assert list(outputs) == ["teacher", "scenes", "small"] and outputs["teacher"] == elsewhere
    assert lines[0] == f"teacher: given -> {elsewhere}" and not any("] init (" in line for line in lines)
    state = json.loads((tmp_path / "second" / "recipe_state.json").read_text())
    assert state == outputs
    with pytest.raises(InputError, match="given nothing="):
        run_recipe(recipe, tmp_path / "third", given={"nothing": elsewhere}, log=lambda line: None)
    with pytest.raises(InputError, match="--until"):
        run_recipe(recipe, tmp_path / "third", only_needed=True, log=lambda line: None)


def test_a_merge_lists_the_turns_more_often(tmp_path) -> None:
    from wamdiff2_ros.model.prompt import format_waypoints
    from wamdiff2_ros.sim.dataset import write_navigation
    from wamdiff2_ros.sim.export import record

    data = tmp_path / "data"
    data.mkdir()
    ends = {"straight": 0.0, "left": 3.5, "slight": -2.0, "right": -6.0}
    plans = [
        record(name, "images/a.png", "plan", format_waypoints(np.linspace([1, 0], [8, end], 8), 2))
        for name, end in ends.items()
    ]
    (data / "planning.json").write_text(json.dumps(plans))
    (data / "detection.json").write_text(json.dumps([record("d", "images/a.png", "boxes", "none")]))
    (data / "qa.json").write_text("[]")
    (data / "camera.json").write_text("{}")
    write_navigation(data, "branch", "ego")
    recipe = {
        "run_dir": str(tmp_path / "run"),
        "device": "cpu",
        "steps": [
            {"name": "scenes", "kind": "generate", "samples": 4},
            {"name": "weighted", "kind": "merge", "from": ["scenes"], "repeat": {"scenes": 2},
             "turns": {"min_lateral_m": 3.0, "repeat": 3}},
        ],
    }  # fmt: skip
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    outputs = run_recipe(load_recipe(path), given={"scenes": str(data)}, log=lambda line: None)
    merged = json.loads((Path(outputs["weighted"]) / "planning.json").read_text())
    assert [item["id"] for item in merged] == ["straight"] * 2 + ["left"] * 6 + ["slight"] * 2 + ["right"] * 6
    assert len(json.loads((Path(outputs["weighted"]) / "detection.json").read_text())) == 2  # plans only


def test_a_time_limit_leaves_steps_that_do_not_fit_and_stops_training_resumably(
    tmp_path, monkeypatch
) -> None:
    from wamdiff2_ros.training import loop

    path = _recipe(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["steps"][0]["expected_s"] = 10**6  # scenes: never fits an hour
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    lines: list[str] = []
    assert run_recipe(load_recipe(path), until="teacher", time_limit=3600.0, log=lines.append) == {}
    assert lines == ["[1/11] scenes (generate): left for the next run (3600 s of the time limit left)"]
    del raw["steps"][0]["expected_s"]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    recipe = load_recipe(path)
    run_recipe(recipe, until="init", log=lambda line: None)
    monkeypatch.setattr(loop, "time", SimpleNamespace(time=lambda: math.inf, perf_counter=time.perf_counter))
    lines.clear()
    outputs = run_recipe(recipe, until="teacher", time_limit=3600.0, log=lines.append)  # late at once
    monkeypatch.undo()
    assert "teacher" not in outputs and "stopped at the time limit" in lines[-1]
    assert [p.name for p in (tmp_path / "run" / "teacher" / "B1").iterdir()] == ["step_0000000"]
    # what a job returns so that a cold machine goes on from there, not from the teacher's first step
    assert resume_checkpoints(recipe, tmp_path / "run", outputs) == [
        str(tmp_path / "run/teacher/B1/step_0000000")
    ]
    outputs = run_recipe(recipe, until="teacher", log=lambda line: None)
    assert Path(outputs["teacher"]).name == "final"


def test_a_reference_to_a_later_step_is_refused(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    steps = [
        {"name": "init", "kind": "init", "vocab_from": ["scenes"]},
        {"name": "scenes", "kind": "generate", "samples": 1},
    ]
    path.write_text(yaml.safe_dump({"run_dir": "x", "steps": steps}))
    with pytest.raises(InputError, match="not an earlier step"):
        load_recipe(path)
    path.write_text(yaml.safe_dump({"run_dir": "x", "steps": [{"name": "a", "kind": "bake"}]}))
    with pytest.raises(InputError, match="kind"):
        load_recipe(path)


@pytest.mark.parametrize("name", ["default_model", "seeing_model"])
def test_the_committed_recipes_load_and_their_training_steps_are_valid_configs(tmp_path, name) -> None:
    from wamdiff2_ros.training.config import load_config

    recipe = load_recipe(f"config/recipes/{name}.yaml")
    assert {"bundled", "heldout", "selection"} <= set(recipe.names) and recipe.device == "cuda"
    for step in (s for s in recipe.steps if s["kind"] == "train"):
        keys = {**recipe.training, **step["set"], "model": "m", "out_dir": str(tmp_path)}
        config = load_config(step["config"], [f"{key}={json.dumps(value)}" for key, value in keys.items()])
        assert config.stage == step["stage"]


def test_a_fresh_machine_gets_the_checkpoints_the_unfinished_steps_need() -> None:
    recipe = load_recipe("config/recipes/seeing_model.yaml")
    done = recipe.names[: recipe.names.index("bundled") + 1]
    outputs = {name: f"runs/x/{name}" for name in done}
    # Referred to: the packed CE student, the Stage II student (packed next), the AR teacher (evaluated, Stage
    # II's teacher) and the CE student (Stage III's start); the last DAgger round's rollouts (in the data
    # Stage III's teachers train on) are remade from the model that drove them, the round-2 student; scenes
    # and merges are remade.
    assert carried_outputs(recipe, outputs) == [
        "runs/x/b32_dagger2",
        "runs/x/b32_dagger3",
        "runs/x/bundled",
        "runs/x/stage2",
        "runs/x/teacher",
    ]
    assert carried_outputs(recipe, {name: f"runs/x/{name}" for name in recipe.names}) == []


def test_an_edited_recipe_makes_again_what_changed_and_what_reads_it(tmp_path) -> None:
    path = _recipe(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["steps"] = raw["steps"][:5]  # scenes, init, teacher, small, packed
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    first = run_recipe(load_recipe(path), log=lambda line: None)
    packed = Path(first["packed"])
    raw["steps"][0]["workers"] = 2  # schedules the step, changes nothing it makes
    raw["steps"][0]["expected_s"] = 5
    raw["steps"][3]["vocab_from"] = ["scenes", "scenes"]  # small: a changed definition (same ids)
    raw["steps"].append({"name": "repacked", "kind": "pack", "model": "teacher"})  # a new round
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    lines: list[str] = []
    second = run_recipe(load_recipe(path), log=lines.append)
    assert lines[:2] == [
        "small (reduce_vocabulary): changed since the last run, to be made again",
        "packed (pack): changed since the last run, to be made again",  # it reads small
    ]
    made = [line.split("]")[1].split()[0] for line in lines if "finished" in line]
    assert made == ["small", "packed", "repacked"] and second["teacher"] == first["teacher"]
    run = tmp_path / "run"
    assert packed.exists() and "repacked" in json.loads((run / "recipe_state.json").read_text())
    # A state newer than its copy (a job's state came back, its recipe.yaml did not): the steps the copy
    # lacks are kept, not deleted on a guess.
    older = {**raw, "steps": [step for step in raw["steps"] if step["name"] != "repacked"]}
    (run / "recipe.yaml").write_text(yaml.safe_dump(older, sort_keys=False))
    lines.clear()
    assert run_recipe(load_recipe(path), log=lines.append) == second
    assert all("done earlier" in line for line in lines) and Path(second["repacked"]).exists()
    # the shared training keys are part of every training step's definition
    raw["training"]["max_new_tokens"] = 64
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    lines.clear()
    run_recipe(load_recipe(path), until="init", log=lines.append)
    changed = [line.split()[0] for line in lines if "changed" in line]
    assert changed == ["teacher", "small", "packed", "repacked"] and not (run / "teacher").exists()


def test_a_model_is_evaluated_only_on_data_of_its_command_rule(tmp_path) -> None:
    from wamdiff2_ros.eval.predict import check_command_rules

    (tmp_path / "config.json").write_text("{}")  # a model from before the rule was recorded: heading
    check_command_rules(tmp_path, tmp_path)  # and a data folder from then: heading too
    (tmp_path / "navigation.json").write_text('{"command_rule": "branch"}')
    with pytest.raises(InputError, match="command rule"):
        check_command_rules(tmp_path, tmp_path)


def test_a_merge_writes_the_answers_in_another_frame_from_the_ground_truth(tmp_path) -> None:
    """One data generation serves models of two plan frames: the merge rewrites the planning answers from
    each folder's ground truth (the expert's ego waypoints and the route around the ego)."""
    from wamdiff2_ros.model.parse import parse_waypoints
    from wamdiff2_ros.model.plan_frame import plan_to_ego
    from wamdiff2_ros.sim.dataset import load_plan_frame
    from wamdiff2_ros.sim.export import ground_truth_from_line

    recipe = {
        "run_dir": str(tmp_path / "run"),
        "device": "cpu",
        "steps": [
            {"name": "scenes", "kind": "generate", "samples": 6, "seed": 2, "width": 128, "workers": 1,
             "scene_kind": "intersection", "plan_frame": "route"},
            {"name": "offset", "kind": "merge", "from": ["scenes"], "plan_frame": "route_offset"},
            {"name": "same", "kind": "merge", "from": ["scenes"]},
        ],
    }  # fmt: skip
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    outputs = run_recipe(load_recipe(path), log=lambda line: None)
    assert load_plan_frame(outputs["offset"]) == "route_offset"
    assert load_plan_frame(outputs["same"]) == "route"
    lines = (Path(outputs["scenes"]) / "ground_truth.jsonl").read_text().splitlines()
    truths = {t["id"]: ground_truth_from_line(t) for t in map(json.loads, lines)}
    for folder, frame in ((outputs["offset"], "route_offset"), (outputs["same"], "route")):
        for record in json.loads((Path(folder) / "planning.json").read_text()):
            truth = truths[record["id"]]
            values = parse_waypoints(record["conversations"][-1]["value"])
            np.testing.assert_allclose(
                plan_to_ego(values, frame, truth.route_ego_m), truth.waypoints_ego, atol=0.05
            )


def test_a_merge_refuses_plans_in_different_frames_and_turns_along_the_route(tmp_path) -> None:
    from wamdiff2_ros.sim.dataset import write_navigation
    from wamdiff2_ros.sim.export import record

    folders = {}
    for name, frame in (("ego", "ego"), ("route", "route")):
        data = tmp_path / name
        data.mkdir()
        (data / "planning.json").write_text(json.dumps([record(name, "images/a.png", "plan", "01.00")]))
        (data / "detection.json").write_text("[]")
        (data / "qa.json").write_text("[]")
        (data / "camera.json").write_text("{}")
        write_navigation(data, "branch", frame)
        folders[name] = str(data)
    steps = [
        {"name": "ego", "kind": "generate", "samples": 1},
        {"name": "route", "kind": "generate", "samples": 1},
        {"name": "mixed", "kind": "merge", "from": ["ego", "route"]},
        {"name": "turning", "kind": "merge", "from": ["route"], "turns": {"min_lateral_m": 3.0, "repeat": 3}},
    ]
    for until, reason in (("mixed", "plans in different frames"), ("turning", "ego-frame plans only")):
        path = tmp_path / f"{until}.yaml"
        path.write_text(yaml.safe_dump({"run_dir": str(tmp_path / until), "device": "cpu", "steps": steps}))
        with pytest.raises(InputError, match=reason):
            run_recipe(load_recipe(path), until=until, only_needed=True, given=folders, log=lambda line: None)
