"""``wamdiff2 sim generate``: driving samples (images, reference JSON, ground truth) and MCAP drives.

Parses, builds a ``GenerateConfig``, calls ``sim.dataset.generate`` and prints the summary with timings as
JSON. The simulator loads only when the command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="generate driving scenes: front-camera images, training JSON, ground truth, MCAP drives",
        description="Driving scenes on highway-env (curvy multi-lane highways with IDM/MOBIL traffic, "
        "braking lead cars, stopped cars; four-way junctions with left/straight/right routes), seen by a "
        "pinhole front camera.",
    )
    verbs = parser.add_subparsers(dest="sim_verb", metavar="VERB", required=True)
    gen = verbs.add_parser(
        "generate",
        help="write N samples: images/, planning.json, detection.json, qa.json, ground_truth.jsonl",
        description="Simulate seeded drives and sample them every --stride-s seconds. The same --seed gives "
        "the same files for any --workers.",
    )
    gen.add_argument("--out", type=Path, required=True, help="output folder (created)")
    gen.add_argument("--samples", type=int, required=True, help="number of samples to write")
    gen.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    gen.add_argument(
        "--width",
        type=int,
        default=640,
        help="image width in pixels; the camera keeps NAVSIM's 1920x1080 field of view (default 640, "
        "the training size; 1920 for NAVSIM's full size)",
    )
    gen.add_argument("--bags", action="store_true", help="also write one rosbag2 MCAP drive per episode")
    gen.add_argument("--workers", type=int, default=0, help="worker processes (default 0: one per CPU)")
    gen.add_argument("--episode-s", type=float, default=14.0, help="simulated seconds per drive (default 14)")
    gen.add_argument("--stride-s", type=float, default=1.0, help="seconds between samples (default 1)")
    gen.add_argument(
        "--min-int-digits",
        type=int,
        choices=(1, 2),
        default=1,
        help="planning answers' number style: 1 plain (5.00, the reference's), 2 padded (05.00)",
    )
    gen.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.sim.dataset import GenerateConfig, generate

    config = GenerateConfig(
        out_dir=args.out,
        samples=args.samples,
        seed=args.seed,
        camera=Camera().scaled_to_width(args.width),
        episode_s=args.episode_s,
        stride_s=args.stride_s,
        bags=args.bags,
        workers=args.workers,
        min_int_digits=args.min_int_digits,
    )
    start_s = time.perf_counter()
    summary = generate(config)
    elapsed_s = time.perf_counter() - start_s
    summary |= {
        "out": str(args.out),
        "seconds": round(elapsed_s, 2),
        "samples_per_s": round(summary["samples"] / elapsed_s, 2),
    }
    print(json.dumps(summary, indent=2))
    return 0
