"""``wamdiff2 train sft|adapt|distill --config FILE [key=value ...]``: run one training stage;
``wamdiff2 train recipe RECIPE [--until STEP] [--resume RUN]``: every stage of a model, from a recipe.

Parses, loads the YAML config with its overrides, calls ``training.loop.train`` and prints the summary as
JSON. Under ``torchrun`` every rank runs this same command.
"""

from __future__ import annotations

import argparse
import json

STAGE_HELP = {
    "sft": "Stage 0: AR supervised fine-tuning at B = 1 (the teacher)",
    "adapt": "Stage I: progressive block adaptation (e.g. B 4 -> 8 -> 16 -> 32)",
    "distill": "Stages II/III: block-wise or model-wise distillation with a symmetric JSD",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a stage: sft (AR teacher), adapt (block sizes), distill (teacher -> student)",
        description="Train one stage from a YAML config (config/train_<stage>_<preset>.yaml). Runs on the "
        "CPU as one process or on GPUs under "
        "'torchrun --nproc-per-node N -m wamdiff2_ros.cli.main train ...' (DDP). Re-running the same "
        "command resumes from the newest checkpoint in out_dir.",
    )
    stages = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for stage, text in STAGE_HELP.items():
        sub = stages.add_parser(stage, help=text, description=text)
        sub.add_argument("--config", required=True, help="YAML stage config; its 'stage' must match")
        sub.add_argument(
            "overrides",
            nargs="*",
            metavar="KEY=VALUE",
            help="config overrides, values read as YAML (e.g. max_steps=10 'block_sizes=[4,8]'); "
            "unknown keys are errors",
        )
        sub.set_defaults(func=run)
    recipe = stages.add_parser(
        "recipe",
        help="make a model from a recipe: data, teacher, block adaptation, distillation, evaluation",
        description="Run the steps of a recipe (config/recipes/*.yaml; wamdiff2_ros/training/recipe.py says "
        "what each step does) in order. Finished steps are recorded in the run folder and skipped when the "
        "recipe runs again; a training step cut short continues from its newest checkpoint.",
    )
    recipe.add_argument("recipe", help="the recipe YAML file")
    recipe.add_argument("--until", help="stop after this step")
    recipe.add_argument("--resume", help="run folder to continue (default: the recipe's run_dir)")
    recipe.add_argument("--device", help="override the recipe's device (e.g. cpu, cuda)")
    recipe.add_argument(
        "--time-limit",
        type=float,
        help="seconds this run may take: training stops before it with a checkpoint, and steps that no "
        "longer fit (their expected_s) are left; run again with --resume to go on",
    )
    recipe.add_argument(
        "--given",
        action="append",
        default=[],
        metavar="STEP=FOLDER",
        help="a step's output made elsewhere, recorded as finished (e.g. bundled4=models/default: a new "
        "run folder goes on from the bundled model); repeatable",
    )
    recipe.add_argument(
        "--only-needed",
        action="store_true",
        help="run only --until and the unfinished steps it reads, not every unfinished step before it",
    )
    recipe.set_defaults(func=run_recipe)


def run_recipe(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.training import recipe

    run_dir = Path(args.resume) if args.resume else None
    loaded = recipe.load_recipe(args.recipe)
    if any("=" not in item for item in args.given):
        raise InputError(f"--given takes STEP=FOLDER, got {args.given}")
    outputs = recipe.run_recipe(
        loaded,
        run_dir,
        until=args.until,
        device=args.device,
        time_limit=args.time_limit,
        given=dict(item.split("=", 1) for item in args.given),
        only_needed=args.only_needed,
    )
    print(json.dumps(outputs, indent=2))
    return 0


def run(args: argparse.Namespace) -> int:
    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.training.config import load_config
    from wamdiff2_ros.training.loop import train

    config = load_config(args.config, args.overrides)
    if config.stage != args.stage:
        raise InputError(f"{args.config} configures stage {config.stage!r}, not {args.stage!r}")
    print(json.dumps(train(config), indent=2))
    return 0
