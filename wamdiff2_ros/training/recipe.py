"""``wamdiff2 train recipe RECIPE``: a model made from one YAML file, step by step, resumable.

A recipe (``config/recipes/*.yaml``) names a run folder, the device, the training keys every training step
shares, and an ordered list of steps, each with a unique ``name`` and a ``kind``:

- ``generate``: simulator scenes (``samples``, ``seed``, ``width``, ``min_int_digits``, ``workers``,
  ``standing_starts``: the fraction of drives that start at rest; ``highway_events_only``: every drive a
  highway with a braking or stopped car ahead; ``command_rule``: how the route becomes the navigation
  command, ``model.prompt.COMMAND_RULES``, the legacy ``heading`` when absent; ``stride_s`` between samples,
  default 1; ``first_sample_s``, default 1; ``scene_kind``: every drive of that kind; ``plan_frame``: the
  answers' frame, ``model.plan_frame.PLAN_FRAMES``, ``ego`` when absent) -> a data folder.
- ``dagger``: ``model`` drives seeded scenes in the closed loop and the expert labels the states it reaches
  (``sim/dagger.py``: ``samples``, ``seed``, ``width``, ``route_m``, ``max_s``, ``workers``: processes
  driving episodes side by side on the CPU; ``stride_s``, ``first_sample_s``, ``highway_events_only``,
  ``scene_kind`` as for ``generate``; ``label_last_states``: the states of an episode's last 4 s too; the
  model's command rule and ``plan_frame``, each its own when absent) -> a data folder.
- ``merge``: the records of the ``from`` data steps in one data folder (image paths made absolute; their
  command rules and plan frames must agree); ``plan_frame``: the planning answers rewritten in that frame
  from each folder's ground truth (one data generation serves models of two frames); ``repeat``
  (``{step: n}``) lists a step's records n times, weighting them (e.g. the states a DAgger round
  reached); ``turns`` (``{min_lateral_m: m, repeat: n}``) lists each planning record whose answer ends m
  metres or more to either side n times as often (the turns, a few per cent of the drives).
- ``init``: a random-weight model (``training/initial.py``: ``seed``, ``layers``, ``intermediate``,
  ``hidden``, ``vision_depth``, ``vision_hidden``; ``vocab_from``: data steps whose ids the vocabulary
  keeps) -> a checkpoint.
- ``train``: one training stage (``stage``: sft, adapt or distill; ``config``: its YAML; ``model`` and for
  distillation ``teacher``: earlier steps; ``data``: a data step; ``heldout``: a data step whose loss is
  logged every ``heldout_every_steps``; ``set``: keys over the config) -> the stage's last phase's final
  checkpoint.
- ``reduce_vocabulary``: ``model`` shrunk to the ids of the ``vocab_from`` data steps -> a checkpoint.
- ``pack``: ``model`` as a bf16 checkpoint (what is bundled: half the bytes) -> a checkpoint.
- ``evaluate``: ``model`` decoded on a data step (``block_size``, ``steps``, ``samples``; planning and
  detection, grammar on) and scored open loop against the baselines -> ``metrics.json``.
- ``closed_loop``: ``model`` and the baselines drive seeded episodes (``policies``, default expert,
  constant-velocity, model and model-scored; ``episodes`` from ``seed``, default 100 from 1000, never a
  training seed; ``width`` of the renders, ``route_m``, ``max_s``, ``block_size``, ``steps``,
  ``commit_rule``, ``detect_every`` (default ``eval.model_policy.DETECT_EVERY_PLANS``), ``smoothing``: the
  planner node's plan smoother, default 0 as decoded, ``workers``: CPU processes side by side) ->
  ``report.json`` (``wamdiff2 eval closed-loop``'s).
- ``bundle``: ``model`` (a pack) installed into the folder ``to`` (e.g. ``models/default``; its card and
  tokenizer files stay) and the card's tables rewritten from ``evaluations``, evaluate and closed-loop
  steps, each evaluate step's ADE also paired with that of ``reference`` (an evaluate step, e.g. the
  teacher's) (``training/card.py``) -> ``to``.

A reference to another step (``model``, ``teacher``, ``data``, ``vocab_from``, ``evaluations``, ...) is
that step's output, so steps can only refer back. Every finished step's output is recorded in the run folder's
``recipe_state.json``; running the recipe again skips finished steps, except those whose output is gone
while a step still to run reads it (a run folder carried to a fresh machine without its data folders
makes the data those steps need again, from the same seeds), and a training step cut short (a GPU job's
time limit) continues from its newest checkpoint, so a recipe spans as many jobs as it needs (its
``max_phase_s`` budget counts the seconds every run of the phase trained). With a time limit
(``time_limit``, ``train recipe --time-limit``) a job ends on its own before the limit: a training step
stops at it with a checkpoint to resume from, and a step whose optional ``expected_s`` (its seconds, for
the steps that cannot stop halfway: data, rollouts, evaluations) no longer fits is left for the next job.
The log (``recipe.log`` in the run folder) says when each step started and ended.

A recipe edited between runs is compared with the copy the last run left in the run folder
(``recipe.yaml``; it travels with ``recipe_state.json``, ``tools/device_recipe.sh`` returns both; an edit
of the copy itself is not seen): a step whose definition changed (its keys, or for a training step the shared
``training`` keys; not the keys that only schedule it: ``expected_s``, ``workers``, ``num_workers``,
``ckpt_every_steps``) is made again, and so is every step that reads it, directly or through another; their
folders are cleared first, so that no checkpoint of the old definition is resumed. Steps added to a recipe
simply run, so a finished run goes on with a new round (a DAgger round, a longer stage) without redoing
what did not change.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wamdiff2_ros.errors import InputError

KINDS = (
    "generate",
    "dagger",
    "merge",
    "init",
    "train",
    "reduce_vocabulary",
    "pack",
    "evaluate",
    "closed_loop",
    "bundle",
)
# keys whose value is one earlier step's name
REFERENCES = ("model", "teacher", "data", "heldout", "reference")
STATE = "recipe_state.json"
# keys that say how a step runs, not what it makes
SCHEDULING_KEYS = ("expected_s", "workers", "num_workers", "host_threads", "ckpt_every_steps")
MIN_STEP_S = 30.0  # a step is not started with less time left (loading a model and the loader alone)
INIT_SHAPE_KEYS = ("seed", "layers", "intermediate", "hidden", "vision_depth", "vision_hidden")


@dataclass(frozen=True)
class Recipe:
    """A parsed recipe file (see the module docstring for its keys)."""

    path: Path
    run_dir: Path
    device: str
    training: dict[str, Any]
    steps: list[dict[str, Any]]

    @property
    def names(self) -> list[str]:
        return [step["name"] for step in self.steps]


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe: known kinds, unique names, every reference to an earlier step.

    Raises:
        InputError: a missing key, an unknown kind, a repeated name or a reference that is not to an
            earlier step.
    """
    path = Path(path)
    raw = yaml.safe_load(path.read_text())
    for key in ("run_dir", "steps"):
        if key not in raw:
            raise InputError(f"{path}: the recipe has no {key!r}")
    seen: list[str] = []
    for step in raw["steps"]:
        name, kind = step.get("name"), step.get("kind")
        if not name or name in seen:
            raise InputError(f"{path}: every step needs a unique name, got {name!r}")
        if kind not in KINDS:
            raise InputError(f"{path}: step {name!r} has kind {kind!r}, not one of {KINDS}")
        for other in references(step):
            if other not in seen:
                raise InputError(f"{path}: step {name!r} refers to {other!r}, which is not an earlier step")
        seen.append(name)
    return Recipe(path, Path(raw["run_dir"]), raw.get("device", "cpu"), raw.get("training", {}), raw["steps"])


def references(step: dict[str, Any]) -> list[str]:
    """The names of the earlier steps ``step`` reads (its model, data, teacher, ...)."""
    return [step[key] for key in REFERENCES if key in step] + [
        *step.get("vocab_from", []),
        *step.get("from", []),
        *step.get("evaluations", []),
    ]


def needed_steps(recipe: Recipe, targets: list[str], finished: dict[str, str] | set[str]) -> list[str]:
    """The ``targets`` and every step they read, directly or through another, back to the ``finished``
    ones, which are not included (recipe order).

    Raises:
        InputError: a name that is no step of the recipe.
    """
    steps = {step["name"]: step for step in recipe.steps}
    needed: set[str] = set()
    todo = list(targets)
    while todo:
        name = todo.pop()
        if name in needed or name in finished:
            continue
        if name not in steps:
            raise InputError(f"no step {name!r} in {recipe.path}")
        needed.add(name)
        todo += references(steps[name])
    return [name for name in recipe.names if name in needed]


DATA_KINDS = ("generate", "dagger", "merge")  # remade from their seeds and references when missing


def carried_outputs(recipe: Recipe, outputs: dict[str, str]) -> list[str]:
    """The finished steps' outputs a fresh machine needs to go on with the unfinished steps: the checkpoints
    they refer to, directly or through a data step (data is not carried, it is remade where it is missing:
    a merge from its sources, DAgger rollouts from the model that drove them, scenes from their seeds)."""
    steps = {step["name"]: step for step in recipe.steps}
    wanted = [ref for step in recipe.steps if step["name"] not in outputs for ref in references(step)]
    carried: list[str] = []
    while wanted:
        name = wanted.pop()
        if name not in outputs or outputs[name] in carried:
            continue  # unfinished: it will be made, from references counted where it is a step itself
        if steps[name]["kind"] in DATA_KINDS:
            wanted += references(steps[name])
        else:
            carried.append(outputs[name])
    return sorted(carried)


def resume_checkpoints(recipe: Recipe, run: Path, outputs: dict[str, str]) -> list[str]:
    """The checkpoints in ``run`` of the training steps a job's limit cut short: each phase's final one if
    the phase finished, else its newest step checkpoint. With ``carried_outputs`` they are what a fresh
    machine needs to go on where the job stopped (without them a cold machine trains the step again)."""
    from wamdiff2_ros.training import checkpoints
    from wamdiff2_ros.training.loop import FINAL

    folders: list[str] = []
    for step in (s for s in recipe.steps if s["kind"] == "train" and s["name"] not in outputs):
        out = Path(run) / step["name"]
        for phase in sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []:
            final = phase / FINAL
            newest = final if (final / checkpoints.STATE).is_file() else checkpoints.latest_step_folder(phase)
            folders += [str(newest)] if newest is not None else []
    return folders


def run_recipe(
    recipe: Recipe,
    run_dir: Path | None = None,
    until: str | None = None,
    device: str | None = None,
    log: Callable[[str], None] = print,
    time_limit: float | None = None,
    given: dict[str, str] | None = None,
    only_needed: bool = False,
) -> dict[str, str]:
    """Run the recipe's unfinished steps in order, up to and including ``until``.

    Args:
        recipe: the recipe.
        run_dir: the run folder (default: the recipe's); an existing one is resumed.
        until: the last step to run (None: all).
        device: overrides the recipe's device.
        log: where progress lines go (they are also appended to the run folder's ``recipe.log``).
        time_limit: seconds this call may take (None: no limit); it stops early, resumably (module
            docstring).
        given: outputs made elsewhere, recorded as finished steps (step name -> its folder, e.g. a bundled
            model for the pack it was installed from: a new run folder goes on from it).
        only_needed: run only ``until`` and the unfinished steps it reads, directly or through another
            (``needed_steps``), not every unfinished step before it.

    Returns:
        Every finished step's output path, by step name.

    Raises:
        InputError: ``until`` names no step, ``given`` names no step or a missing folder, or
            ``only_needed`` without ``until``.
    """
    if until is not None and until not in recipe.names:
        raise InputError(f"--until {until!r} is not a step of {recipe.path}: {recipe.names}")
    if only_needed and until is None:
        raise InputError("only the steps --until needs: name the step (--until)")
    for name, path in (given or {}).items():
        if name not in recipe.names or not Path(path).exists():
            raise InputError(f"given {name}={path}: no such step in {recipe.path}, or no such folder")
    run = Path(run_dir or recipe.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    state_path = run / STATE
    outputs: dict[str, str] = json.loads(state_path.read_text()) if state_path.exists() else {}
    outputs |= given or {}
    deadline = None if time_limit is None else time.time() + time_limit
    command = f"wamdiff2 train recipe {recipe.path} --resume {run} --until"
    context = _Context(run, device or recipe.device, recipe.training, outputs, deadline, command)

    def note(line: str) -> None:
        log(line)
        with (run / "recipe.log").open("a") as file:
            file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    copy = run / "recipe.yaml"  # what the run was made from, beside it
    if recipe.path.resolve() != copy.resolve():
        if copy.exists():
            for name in _changed_steps(recipe, yaml.safe_load(copy.read_text())):
                step = recipe.steps[recipe.names.index(name)]
                if name in outputs or context.folder(step).exists():  # a new step has nothing to clear
                    outputs.pop(name, None)
                    shutil.rmtree(context.folder(step), ignore_errors=True)
                    note(f"{name} ({step['kind']}): changed since the last run, to be made again")
            state_path.write_text(json.dumps(outputs, indent=1) + "\n")
        shutil.copyfile(recipe.path, copy)
    for name, path in (given or {}).items():
        note(f"{name}: given -> {path}")
    state_path.write_text(json.dumps(outputs, indent=1) + "\n")

    if only_needed:
        pending = needed_steps(recipe, [until], outputs)
    else:
        last = recipe.names.index(until) if until else len(recipe.steps) - 1
        pending = [name for name in recipe.names[: last + 1] if name not in outputs]
    remake = _missing_inputs(recipe, outputs, pending)
    needed = set(pending) | remake if only_needed else None
    for index, step in enumerate(recipe.steps, 1):
        name = step["name"]
        prefix = f"[{index}/{len(recipe.steps)}] {name} ({step['kind']})"
        if needed is not None and name not in needed:
            continue
        if name in outputs and name not in remake:
            note(f"{prefix}: done earlier -> {outputs[name]}")
        else:
            left = math.inf if deadline is None else deadline - time.time()
            if left < max(MIN_STEP_S, step.get("expected_s", 0)):
                note(f"{prefix}: left for the next run ({left:.0f} s of the time limit left)")
                break
            note(f"{prefix}: started")
            # Not done until it finishes: a job killed mid-step leaves a partial output, which the next
            # run must make again, not read as done (a step made again was recorded by an earlier run)
            if outputs.pop(name, None) is not None:
                state_path.write_text(json.dumps(outputs, indent=1) + "\n")
            started = time.monotonic()
            try:
                outputs[name] = str(STEPS[step["kind"]](step, context))
            except _Stopped:
                note(
                    f"{prefix}: stopped at the time limit after {time.monotonic() - started:.0f} s, resumable"
                )
                break
            state_path.write_text(json.dumps(outputs, indent=1) + "\n")
            note(f"{prefix}: finished in {time.monotonic() - started:.0f} s -> {outputs[name]}")
        if name == until:
            break
    return outputs


def _changed_steps(recipe: Recipe, previous: dict[str, Any]) -> list[str]:
    """The steps to make again after the recipe changed from ``previous`` (the raw recipe of the last run):
    those whose definition differs and every step that reads one of them. A step ``previous`` lacks is new
    (nothing to clear), or its output was recorded by a run whose copy did not come back with the state:
    it is kept, never deleted on a guess."""

    def definition(step: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in step.items() if k not in SCHEDULING_KEYS}
        if isinstance(kept.get("set"), dict):
            kept["set"] = {k: v for k, v in kept["set"].items() if k not in SCHEDULING_KEYS}
        return kept

    before = {step["name"]: definition(step) for step in previous.get("steps", [])}
    training_changed = definition(previous.get("training") or {}) != definition(recipe.training)
    changed: list[str] = []
    for step in recipe.steps:
        known = step["name"] in before
        if (
            (known and before[step["name"]] != definition(step))
            or (known and step["kind"] == "train" and training_changed)
            or any(ref in changed for ref in references(step))
        ):
            changed.append(step["name"])
    return changed


def _missing_inputs(recipe: Recipe, outputs: dict[str, str], pending: list[str]) -> set[str]:
    """The finished steps to run again: those whose output is gone while a ``pending`` step (one still to
    run) reads it, directly or through another one run again."""
    steps = {step["name"]: step for step in recipe.steps}
    wanted = [ref for name in pending for ref in references(steps[name])]
    remake: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in outputs and name not in remake and not Path(outputs[name]).exists():
            remake.add(name)
            wanted += references(steps[name])
    return remake


class _Stopped(Exception):
    """A training step reached the time limit (its checkpoint resumes it)."""


@dataclass(frozen=True)
class _Context:
    run: Path
    device: str
    training: dict[str, Any]
    outputs: dict[str, str]
    deadline: float | None = None  # time.time() at which training steps stop
    command: str = ""  # how to run the recipe up to a step: ``command`` + the step's name

    def output(self, name: str) -> Path:
        return Path(self.outputs[name])

    def folder(self, step: dict[str, Any]) -> Path:
        return self.run / step["name"]


def _generate(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.model.plan_frame import DEFAULT_PLAN_FRAME
    from wamdiff2_ros.model.prompt import LEGACY_COMMAND_RULE
    from wamdiff2_ros.sim.dataset import GenerateConfig, generate

    out = context.folder(step)
    config = GenerateConfig(
        out_dir=out,
        samples=step["samples"],
        seed=step.get("seed", 0),
        camera=Camera().scaled_to_width(step.get("width", 192)),
        min_int_digits=step.get("min_int_digits", 2),  # the bundled model's padded style, as sim generate
        workers=step.get("workers", 0),
        standing_starts=step.get("standing_starts", 0.0),
        highway_events_only=step.get("highway_events_only", False),
        stride_s=step.get("stride_s", 1.0),
        first_sample_s=step.get("first_sample_s", 1.0),
        scene_kind=step.get("scene_kind"),
        # a step without one keeps the rule it was written for: recipes from before the key, the legacy
        command_rule=step.get("command_rule", LEGACY_COMMAND_RULE),
        plan_frame=step.get("plan_frame", DEFAULT_PLAN_FRAME),
    )
    generate(config, progress=False)
    return out


def _dagger(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.eval.model_policy import model_dagger_data

    out = context.folder(step)
    keys = "seed route_m max_s block_size steps workers stride_s first_sample_s label_last_states"
    extra = ("highway_events_only", "scene_kind", "command_rule", "plan_frame")
    optional = {key: step[key] for key in (*keys.split(), *extra) if key in step}
    model_dagger_data(
        out,
        step["samples"],
        checkpoint=str(context.output(step["model"])),
        width=step.get("width", 192),  # the training renders' width, as the generate step's default
        device="cuda" if context.device.startswith("cuda") else "cpu",
        progress=False,
        **optional,
    )
    return out


def _merge(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.sim.dataset import load_command_rule, load_plan_frame, write_navigation

    out = context.folder(step)
    out.mkdir(parents=True, exist_ok=True)
    folders = {name: context.output(name) for name in step["from"]}
    rules = {load_command_rule(folder) for folder in folders.values()}
    if len(rules) > 1:
        raise InputError(f"step {step['name']!r} merges data of different command rules: {sorted(rules)}")
    frames = {load_plan_frame(folder) for folder in folders.values()}
    if len(frames) > 1:
        raise InputError(f"step {step['name']!r} merges plans in different frames: {sorted(frames)}")
    frame = step.get("plan_frame", next(iter(frames)))
    repeat = step.get("repeat", {})
    turns = step.get("turns", {})
    if turns and frame != "ego":  # a turn's lateral is the route's in its answer, not the plan's
        raise InputError(f"step {step['name']!r}: turns are found in ego-frame plans only")
    for task in ("planning", "detection", "qa"):
        merged = []
        for name, folder in folders.items():
            items = json.loads((folder / f"{task}.json").read_text())
            if task == "planning" and frame not in frames:
                items = _answers_in_frame(items, folder, frame)
            for item in items:
                absolute = item | {"image": [str((folder / path).resolve()) for path in item["image"]]}
                times = repeat.get(name, 1)
                if task == "planning" and turns and _plan_end_lateral_m(item) >= turns["min_lateral_m"]:
                    times *= turns["repeat"]
                merged += [absolute] * times
        (out / f"{task}.json").write_text(json.dumps(merged, indent=1))
    shutil.copyfile(next(iter(folders.values())) / "camera.json", out / "camera.json")
    write_navigation(out, rules.pop(), frame)
    return out


def _answers_in_frame(records: list[dict], folder: Path, frame: str) -> list[dict]:
    """Planning records with their answers rewritten in ``frame`` from the folder's ground truth (the
    expert's waypoints and the route around the ego), in their own number style."""
    from wamdiff2_ros.model.plan_frame import plan_in_frame
    from wamdiff2_ros.model.prompt import answers_min_int_digits, format_waypoints
    from wamdiff2_ros.sim.export import ground_truth_from_line

    path = folder / "ground_truth.jsonl"
    if not path.is_file():
        raise InputError(f"{folder} has no ground truth to write its answers in the {frame} frame from")
    lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    truths = {line["id"]: ground_truth_from_line(line) for line in lines}
    rewritten = []
    for record in records:
        answer = record["conversations"][-1]["value"]
        truth = truths[record["id"]]
        values = plan_in_frame(truth.waypoints_ego, frame, truth.route_ego_m)
        text = format_waypoints(values, answers_min_int_digits([answer]))
        turns = [*record["conversations"][:-1], record["conversations"][-1] | {"value": text}]
        rewritten.append(record | {"conversations": turns})
    return rewritten


def _plan_end_lateral_m(record: dict) -> float:
    """How far to the side (either way) a planning record's answer ends, in metres."""
    from wamdiff2_ros.model.parse import parse_waypoints

    return abs(float(parse_waypoints(record["conversations"][-1]["value"])[-1, 1]))


def _kept_ids(step: dict[str, Any], context: _Context) -> list[int] | None:
    from wamdiff2_ros.model.tokenizer import load_tokenizer
    from wamdiff2_ros.model.vocab import ids_for
    from wamdiff2_ros.training.data import vocabulary_texts

    folders = [context.output(name) for name in step.get("vocab_from", [])]
    return ids_for(load_tokenizer(), vocabulary_texts(folders)) if folders else None


def _init(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.model.checkpoint import save_checkpoint
    from wamdiff2_ros.training.initial import initial_model

    shape = {key: step[key] for key in INIT_SHAPE_KEYS if key in step}
    out = context.folder(step)
    save_checkpoint(initial_model(**shape, kept_ids=_kept_ids(step, context)), out)
    return out


def _train(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.training.config import load_config
    from wamdiff2_ros.training.loop import train

    data = context.output(step["data"])
    keys = {
        **context.training,
        "device": context.device,
        "model": str(context.output(step["model"])),
        "out_dir": str(context.folder(step)),
        "data": _task_files(data),
        "eval_data": {},
        **({"teacher": str(context.output(step["teacher"]))} if "teacher" in step else {}),
        **({"heldout_data": _task_files(context.output(step["heldout"]))} if "heldout" in step else {}),
        **step.get("set", {}),
    }
    overrides = [f"{key}={json.dumps(value)}" for key, value in keys.items()]  # JSON is YAML
    config = load_config(step["config"], overrides)
    if config.stage != step["stage"]:
        raise InputError(f"step {step['name']!r}: {step['config']} configures {config.stage!r}")
    result = train(config, deadline=context.deadline)
    if result["stopped"]:
        raise _Stopped
    return Path(result["phases"][-1]["checkpoint"])


def _task_files(folder: Path) -> dict[str, str]:
    return {task: str(folder / f"{task}.json") for task in ("planning", "detection", "qa")}


def reduce_checkpoint(source: Path, out: Path, kept_ids: list[int]) -> None:
    """A copy of checkpoint ``source`` in ``out`` whose vocabulary keeps only ``kept_ids`` (their logits
    unchanged; ``model/vocab.py``); its other files (tokenizer, lineage, pixel budget) are copied as is."""
    from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget, save_checkpoint
    from wamdiff2_ros.model.vocab import reduce_vocabulary

    small = reduce_vocabulary(load_checkpoint(source).model, kept_ids)
    if out.resolve() != source.resolve():
        shutil.copytree(source, out, dirs_exist_ok=True)
    save_checkpoint(small, out, pixels=read_pixel_budget(source))


def _reduce_vocabulary(step: dict[str, Any], context: _Context) -> Path:
    out = context.folder(step)
    reduce_checkpoint(context.output(step["model"]), out, _kept_ids(step, context))
    return out


def _pack(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget, save_checkpoint
    from wamdiff2_ros.training import checkpoints

    source, out = context.output(step["model"]), context.folder(step)
    loaded = load_checkpoint(source, dtype="bf16")
    save_checkpoint(loaded.model, out, pixels=read_pixel_budget(source))
    for lineage in (checkpoints.STATE, checkpoints.CONFIG):  # what made it: a bundled model's card cites them
        if (source / lineage).exists():
            shutil.copyfile(source / lineage, out / lineage)
    return out


def _evaluate(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.eval.open_loop import evaluate_open_loop, load_predictions, score_detections
    from wamdiff2_ros.eval.predict import (
        MAX_NEW_TOKENS,
        answers_file,
        check_command_rules,
        cost_summary,
        predict_records,
    )
    from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget
    from wamdiff2_ros.model.image import MIN_PIXELS
    from wamdiff2_ros.model.prompt import min_int_digits_of
    from wamdiff2_ros.training.data import load_records

    checkpoint, data, out = context.output(step["model"]), context.output(step["data"]), context.folder(step)
    check_command_rules(checkpoint, data)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_checkpoint(checkpoint)
    min_pixels, max_pixels = read_pixel_budget(checkpoint) or (MIN_PIXELS, loaded.max_pixels)
    answers, costs = {}, {}
    for task in ("planning", "detection"):
        records = load_records(data / f"{task}.json", task)[: step.get("samples") or None]
        config = DecodeConfig(
            block_size=step.get("block_size", 32),
            steps=step.get("steps", 8),
            max_new_tokens=MAX_NEW_TOKENS[task],
            grammar=True,
            min_int_digits=min_int_digits_of(loaded.model.config),
        )
        predictions = predict_records(
            loaded.model, loaded.tokenizer, records, config, min_pixels=min_pixels, max_pixels=max_pixels
        )
        costs[task] = cost_summary(predictions)
        answers[task] = out / f"{task}.json"
        answers[task].write_text(json.dumps(answers_file(task, data, predictions), indent=1) + "\n")
    report = evaluate_open_loop(data, {"model": load_predictions(answers["planning"])})
    report["detection"] = score_detections(data, answers["detection"])
    report["cost"] = costs  # forwards per answer: the student's bar is "several times fewer" than its teacher
    (out / "metrics.json").write_text(json.dumps(report, indent=2) + "\n")
    return out / "metrics.json"


def _closed_loop(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.eval.model_policy import closed_loop_report
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig

    out = context.folder(step)
    out.mkdir(parents=True, exist_ok=True)
    config = ClosedLoopConfig(
        route_length_m=step.get("route_m", 120.0),
        max_duration_s=step.get("max_s", 40.0),
        camera=Camera().scaled_to_width(step.get("width", 640)),
    )
    start = step.get("seed", 1000)
    report = closed_loop_report(
        step.get("policies", ["expert", "constant-velocity", "model", "model-scored"]),
        list(range(start, start + step.get("episodes", 100))),
        config,
        str(context.output(step["model"])),
        step.get("block_size", 32),
        step.get("steps", 8),
        step.get("detect_every"),
        progress=False,
        workers=step.get("workers", 1),
        commit_rule=step.get("commit_rule"),
        smoothing=step.get("smoothing", 0.0),
    )
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return out / "report.json"


def _bundle(step: dict[str, Any], context: _Context) -> Path:
    from wamdiff2_ros.training.card import bundle

    evaluations = {name: context.output(name) for name in step.get("evaluations", [])}
    for name, path in evaluations.items():
        if path.name not in ("metrics.json", "report.json"):
            raise InputError(f"step {step['name']!r}: {name!r} is not an evaluate or closed_loop step")
    reference = (step["reference"], context.output(step["reference"])) if "reference" in step else None
    if reference is not None and reference[1].name != "metrics.json":
        raise InputError(f"step {step['name']!r}: its reference {reference[0]!r} is not an evaluate step")
    return bundle(
        context.output(step["model"]),
        Path(step["to"]),
        f"{context.command} {step['name']}",
        {name: path for name, path in evaluations.items() if path.name == "metrics.json"},
        {name: path for name, path in evaluations.items() if path.name == "report.json"},
        reference,
    )


STEPS: dict[str, Callable[[dict[str, Any], _Context], Path]] = {
    "generate": _generate,
    "dagger": _dagger,
    "merge": _merge,
    "init": _init,
    "train": _train,
    "reduce_vocabulary": _reduce_vocabulary,
    "pack": _pack,
    "evaluate": _evaluate,
    "closed_loop": _closed_loop,
    "bundle": _bundle,
}
