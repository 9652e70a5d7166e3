"""``wamdiff2 train sft|adapt|distill --config FILE [key=value ...]``: run one training stage.

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


def run(args: argparse.Namespace) -> int:
    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.training.config import load_config
    from wamdiff2_ros.training.loop import train

    config = load_config(args.config, args.overrides)
    if config.stage != args.stage:
        raise InputError(f"{args.config} configures stage {config.stage!r}, not {args.stage!r}")
    print(json.dumps(train(config), indent=2))
    return 0
