"""``wamdiff2 sim generate``: driving samples (images, reference JSON, ground truth) and MCAP drives;
``wamdiff2 sim dagger``: the same from a model's closed-loop drives, labelled by the expert.

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
        "--kind",
        help="every drive of this scene kind: highway, intersection or roundabout (default: drawn "
        "from each seed)",
    )
    gen.add_argument(
        "--first-sample-s",
        type=float,
        default=1.0,
        help="time of a drive's first sample (default 1; a standing start's is 0)",
    )
    gen.add_argument(
        "--min-int-digits",
        type=int,
        choices=(1, 2),
        default=2,
        help="planning answers' number style: 2 padded (05.00: the bundled model's; default), 1 plain "
        "(5.00, the reference's)",
    )
    gen.add_argument(
        "--standing-starts",
        type=float,
        default=0.0,
        help="fraction of drives whose ego starts at rest, sampled from t = 0 (default 0)",
    )
    gen.add_argument(
        "--highway-events-only",
        action="store_true",
        help="every drive on a highway with a braking lead car or a stopped car ahead (training data for "
        "braking and lane changes; otherwise one highway drive in two has such an event)",
    )
    gen.add_argument(
        "--command-rule",
        default="branch",
        help="how the route becomes the navigation command: branch, the way it goes at its next junction "
        "or roundabout exit (default); branch_distance, the same with the distance to that branch in the "
        "prompt ('right in 35m'); heading, its heading change over 50 m (what models trained before "
        "2026-12-03 read; ambiguous in roundabouts)",
    )
    gen.add_argument(
        "--plan-frame",
        choices=("ego", "route", "route_offset"),
        default="ego",
        help="the frame the planning answers are written in: ego (x forward, y left; default), route (s "
        "along the route, d left of its centreline) or route_offset (d left of the car's offset from it; "
        "model/plan_frame.py)",
    )
    gen.set_defaults(func=run_generate)
    dagger = verbs.add_parser(
        "dagger",
        help="DAgger data: a model drives seeded scenes, the expert labels the states it reaches",
        description="Roll the model out in the closed loop (as 'eval closed-loop --policy model' drives) and "
        "write, every --stride-s seconds, the frame it saw with the privileged expert's plan from that "
        "state as the planning answer, in 'generate''s layout. Samples need 4 s of drive after them (the "
        "other vehicles' futures), so long routes keep more of each episode.",
    )
    dagger.add_argument("--out", type=Path, required=True, help="output folder (created)")
    dagger.add_argument("--samples", type=int, required=True, help="number of samples to write")
    dagger.add_argument("--model", default="", help="checkpoint folder (default: the bundled model)")
    dagger.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    dagger.add_argument("--width", type=int, default=640, help="image width in pixels (default 640)")
    dagger.add_argument("--stride-s", type=float, default=1.0, help="seconds between samples (default 1)")
    dagger.add_argument(
        "--first-sample-s", type=float, default=1.0, help="time of an episode's first sample (default 1)"
    )
    dagger.add_argument(
        "--label-last-states",
        action="store_true",
        help="also label the states of an episode's last 4 s (the scene driven on past its end for the "
        "other vehicles' futures): the states just before a collision or a departure",
    )
    dagger.add_argument(
        "--kind",
        help="every episode of this scene kind: highway, intersection or roundabout (default: "
        "drawn from each seed)",
    )
    dagger.add_argument(
        "--highway-events-only",
        action="store_true",
        help="every episode on a highway with a braking lead car or a stopped car ahead",
    )
    dagger.add_argument(
        "--command-rule",
        help="the navigation rule the samples' prompts are written in (default: the one the model reads, "
        "which it drives on either way)",
    )
    dagger.add_argument(
        "--plan-frame",
        choices=("ego", "route", "route_offset"),
        help="the frame the expert's answers are written in (default: the one the model writes)",
    )
    dagger.add_argument("--route-m", type=float, default=400.0, help="route length (default 400 m)")
    dagger.add_argument("--max-s", type=float, default=20.0, help="time limit per episode (default 20 s)")
    dagger.add_argument("--plan-hz", type=float, default=2.0, help="the model's planning rate (default 2)")
    dagger.add_argument("--block-size", type=int, default=32, help="the model's block size B (default 32)")
    dagger.add_argument("--steps", type=int, default=8, help="denoising steps per block (default 8)")
    dagger.add_argument(
        "--workers", type=int, default=1, help="CPU processes driving episodes side by side (default 1)"
    )
    dagger.set_defaults(func=run_dagger)


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
        standing_starts=args.standing_starts,
        highway_events_only=args.highway_events_only,
        command_rule=args.command_rule,
        plan_frame=args.plan_frame,
        first_sample_s=args.first_sample_s,
        scene_kind=args.kind,
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


def run_dagger(args: argparse.Namespace) -> int:
    from wamdiff2_ros.eval.model_policy import model_dagger_data

    start_s = time.perf_counter()
    summary = model_dagger_data(
        args.out,
        args.samples,
        checkpoint=args.model or None,
        seed=args.seed,
        width=args.width,
        stride_s=args.stride_s,
        route_m=args.route_m,
        max_s=args.max_s,
        plan_hz=args.plan_hz,
        block_size=args.block_size,
        steps=args.steps,
        command_rule=args.command_rule,
        plan_frame=args.plan_frame,
        workers=args.workers,
        first_sample_s=args.first_sample_s,
        label_last_states=args.label_last_states,
        highway_events_only=args.highway_events_only,
        scene_kind=args.kind,
    )
    summary |= {"out": str(args.out), "seconds": round(time.perf_counter() - start_s, 2)}
    print(json.dumps(summary, indent=2))
    return 0
