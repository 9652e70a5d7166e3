"""tools/recipe_smoke.py runs the steps a real run would, and what they read, back to the given ones."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from wamdiff2_ros.training.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("recipe_smoke", ROOT / "tools" / "recipe_smoke.py")
smoke = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(smoke)
SEEING = ROOT / "config" / "recipes" / "seeing_model.yaml"


def test_a_dagger_round_runs_its_steps_and_the_data_they_read_from_the_given_pack(tmp_path):
    path = smoke.smoke_recipe(
        str(SEEING), tmp_path, "closed_loop6_seed1_fresh", "closed_loop7", {"bundled6": str(tmp_path)}
    )
    steps = {step["name"]: step for step in load_recipe(path).steps}
    data = ["train_scenes_d", "event_scenes_d", "event_scenes_start_d", "junction_scenes_d"]
    data += ["selection_scenes_d", "heldout_scenes_d"]
    round7 = ["rollouts7", "event_rollouts7", "with_rollouts7", "b32_dagger7", "bundled7", "heldout7"]
    round7 += ["b32_dagger7_seed1", "bundled7_seed1"]  # the second seed trains before the evaluations
    assert set(steps) == {"bundled6", *data, *round7, "closed_loop7"}
    assert steps["bundled6"] == {"name": "bundled6", "kind": "init"}  # a stand-in: finished in the state
    assert yaml.safe_load((tmp_path / "run" / "recipe_state.json").read_text()) == {"bundled6": str(tmp_path)}
    assert steps["rollouts7"]["samples"] == 12 and steps["heldout7"]["samples"] == 4
    assert steps["b32_dagger7"]["set"]["max_steps"] == 2 and steps["b32_dagger7"]["set"]["lr"] == 2.5e-4


def test_without_after_only_the_chain_of_the_last_step_runs(tmp_path):
    path = smoke.smoke_recipe(str(SEEING), tmp_path, None, "bundled7", {"bundled6": str(tmp_path)})
    names = [step["name"] for step in load_recipe(path).steps]
    assert "heldout7" not in names and "heldout_scenes_d" not in names
    assert names[-3:] == ["with_rollouts7", "b32_dagger7", "bundled7"]


def test_a_bundle_step_is_never_run(tmp_path):
    with pytest.raises(SystemExit, match="bundle"):
        smoke.smoke_recipe(str(SEEING), tmp_path, None, "bundle", {})
