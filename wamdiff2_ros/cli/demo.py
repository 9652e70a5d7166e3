"""``wamdiff2 demo``: the whole stack on a generated drive (see wamdiff2_ros/nodes/demo.py)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulate a drive, replay it through the planner and scorer nodes, draw and score the result",
        description=(
            "Generates a short drive as a rosbag2 bag, replays it with /clock through the real planner and "
            "scorer nodes (as planner.launch.py config:=carla use_sim_time:=true starts them), records their "
            "outputs, and writes a contact sheet, a GIF and open-loop metrics. The model is the bundled "
            "default model (models/default) unless --model or --preset names another."
        ),
    )
    parser.add_argument(
        "--out", type=Path, default=Path("demo_output"), help="output folder (default demo_output)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the drive (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="scene seed (default 0)")
    parser.add_argument("--model", default="", help="checkpoint folder (default: the bundled default model)")
    parser.add_argument(
        "--preset", default="", choices=("", "tiny", "2b", "8b"), help="random-weight preset instead"
    )
    parser.add_argument(
        "--rate", type=float, default=0.5, help="replay speed; the CPU planner is slow (default 0.5)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wamdiff2_ros.nodes.demo import run_demo

    started = time.perf_counter()
    outputs = run_demo(
        args.out, seconds=args.seconds, seed=args.seed, model=args.model, preset=args.preset, rate=args.rate
    )
    print(json.dumps(outputs.summary, indent=2))
    print(f"demo finished in {time.perf_counter() - started:.0f} s; outputs:")
    for name in ("drive_bag", "outputs_bag", "contact_sheet", "animation", "metrics"):
        print(f"  {name:<14} {getattr(outputs, name)}")
    return 0
