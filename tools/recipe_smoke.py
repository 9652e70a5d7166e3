"""Run a recipe's chain of steps on the CPU at toy sizes, before device time is spent on it.

A GPU job that stops at a step's error (a reference to a missing output, data of two command rules in one
merge, a key a step does not take) costs a device call. This runs the same steps in the same order through
the same code, each shrunk to seconds: data and rollout steps 12 samples on 2 processes (300 where a
vocabulary is cut from them), training 2 steps of 8, evaluations 4 samples, closed loops 1 episode. The
steps run are ``--until``'s and every step it reads (with ``--after``: every step between the two as well,
as a real run to ``--until`` from a run folder finished through ``--after`` would run them), back to the
``--given`` ones, whose outputs (finished steps of a real run folder) are used as they are and never run.
A ``bundle`` step is never run (it would write into ``models/default``).

Usage:
    python3 tools/recipe_smoke.py RECIPE OUT_DIR --until STEP [--after STEP] [--given NAME=PATH ...]
e.g. round 7 of the seeing recipe from round 6's pack (~1 minute):
    python3 tools/recipe_smoke.py config/recipes/seeing_model.yaml /tmp/smoke --after closed_loop6_seed1_fresh
        --until closed_loop7_seed1_fresh --given bundled6=runs/seeing_model5/bundled6
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from wamdiff2_ros.training.recipe import load_recipe, needed_steps, run_recipe

SHRINK = {  # by step kind: keys set over the step's own
    "generate": {"samples": 12, "workers": 2},
    "dagger": {"samples": 12, "workers": 2},
    "evaluate": {"samples": 4},
    "closed_loop": {"episodes": 1, "workers": 1},
}
VOCABULARY_SAMPLES = 300  # a data step a vocabulary is cut from: enough to hold every answer word
TRAIN_SHRINK = {"max_steps": 2, "max_phase_s": 0, "global_batch_size": 8, "local_batch_size": 8}
TRAINING_SHRINK = {"num_workers": 1, "heldout_every_steps": 0, "autocast_bf16": False}


def targets(names: list[str], after: str | None, until: str) -> list[str]:
    """``until``, and with ``after`` every step between the two (what a real run to ``until`` would run)."""
    if after is None:
        return [until]
    for name in (after, until):
        if name not in names:
            raise SystemExit(f"no step {name!r} in the recipe")
    return names[names.index(after) + 1 : names.index(until) + 1]


def smoke_recipe(recipe_path: str, out: Path, after: str | None, until: str, given: dict[str, str]) -> Path:
    """Write the shrunk recipe and a run folder whose state holds the given outputs; returns the recipe."""
    recipe = load_recipe(recipe_path)
    steps = {step["name"]: step for step in recipe.steps}
    names = needed_steps(recipe, targets(recipe.names, after, until), set(given))
    # A reduced vocabulary keeps the ids of its data steps' texts: at 12 samples a rare answer ("yes" of a
    # question) can be missing from them and present in a later step's data, which then fails to train.
    vocabulary_data = {ref for name in names for ref in steps[name].get("vocab_from", [])}
    shrunk = []
    for name in given:  # stand-ins that are never run (finished in the state): kept only to be referred to
        shrunk.append({"name": name, "kind": "init"})
    for name in names:
        step = {**steps[name], **SHRINK.get(steps[name]["kind"], {})}
        if name in vocabulary_data and "samples" in step:
            step["samples"] = VOCABULARY_SAMPLES
        if step["kind"] == "bundle":
            raise SystemExit(f"step {name!r} is a bundle: stop before it (--until)")
        if step["kind"] == "train":
            step["set"] = {**step.get("set", {}), **TRAIN_SHRINK}
        shrunk.append(step)
    run = out / "run"
    run.mkdir(parents=True, exist_ok=True)
    state = {name: str(Path(path).resolve()) for name, path in given.items()}
    (run / "recipe_state.json").write_text(json.dumps(state, indent=1))
    training = {**recipe.training, **TRAINING_SHRINK}
    path = out / "recipe.yaml"
    smoke = {"run_dir": str(run), "device": "cpu", "training": training, "steps": shrunk}
    path.write_text(yaml.safe_dump(smoke, sort_keys=False))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("out", type=Path, help="a scratch folder (the shrunk recipe and its run folder)")
    parser.add_argument("--until", required=True, help="the last step to run")
    parser.add_argument("--after", help="run every step after this one too (as a real run to --until would)")
    parser.add_argument("--given", action="append", default=[], metavar="NAME=PATH", help="a finished step")
    args = parser.parse_args()
    given = dict(item.split("=", 1) for item in args.given)
    path = smoke_recipe(args.recipe, args.out, args.after, args.until, given)
    print(f"{path}: {len(load_recipe(path).steps) - len(given)} steps", flush=True)
    state = run_recipe(load_recipe(path), device="cpu")
    print(json.dumps(state, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
