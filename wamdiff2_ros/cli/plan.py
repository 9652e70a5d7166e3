"""``wamdiff2 plan``: plan one front image with a checkpoint or a random-weight preset; print waypoints.

Heavy imports (torch, transformers) happen inside ``run`` so that ``wamdiff2 --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from wamdiff2_ros.decoding.config import COMMIT_RULES, PLAN_STEPS

COMMAND_CHOICES = ("left", "straight", "right", "unknown")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="plan 8 waypoints (4 s) for one front image and ego state",
        description="Build the WAM-Diff2 planning prompt from an image and the ego state, decode it by block "
        "diffusion and print the waypoints (ego frame: x forward, y left, metres, 0.5 s apart), the number "
        "of forward passes and the time. Without --checkpoint or --preset the bundled default model plans; "
        "--preset builds random weights (for testing the pipeline: their waypoints mean nothing).",
    )
    parser.add_argument("--image", required=True, help="front camera image file (any format PIL reads)")
    parser.add_argument("--velocity", nargs=2, type=float, required=True, metavar=("VX", "VY"), help="m/s")
    parser.add_argument(
        "--acceleration", nargs=2, type=float, required=True, metavar=("AX", "AY"), help="m/s^2"
    )
    parser.add_argument("--command", required=True, choices=COMMAND_CHOICES, help="navigation command")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="checkpoint folder (config.json, *.safetensors, tokenizer)")
    source.add_argument("--preset", default="", help="random-weight preset: tiny, 2b or 8b")
    parser.add_argument("--block-size", type=int, default=32, help="tokens per block B; 1 = AR (default 32)")
    parser.add_argument(
        "--steps", type=int, default=PLAN_STEPS, help=f"denoising steps per block (default {PLAN_STEPS})"
    )
    parser.add_argument("--remasking", choices=COMMIT_RULES, default=COMMIT_RULES[0], help="commit rule")
    parser.add_argument("--threshold", type=float, default=0.9, help="dynamic rule threshold (default 0.9)")
    parser.add_argument("--candidates", type=int, default=1, help="trajectories decoded in one batch (K)")
    parser.add_argument(
        "--temperature", type=float, default=None, help="sampling temperature (default 0, or 1 when K > 1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of candidate 0; candidate k uses seed + k")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="answer budget (default 128)")
    parser.add_argument(
        "--cache-order", choices=("fused", "reference"), default="fused", help="KV write order"
    )
    parser.add_argument("--max-step-m", type=float, default=20.0, help="grammar bound per 0.5 s step (m)")
    parser.add_argument("--no-grammar", action="store_true", help="decode unconstrained (may not parse)")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32", help="weights dtype")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def _read_image(path: str):
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    from wamdiff2_ros.errors import InputError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except (OSError, UnidentifiedImageError) as error:
        raise InputError(f"cannot read image {path}: {error}") from error


def run(args: argparse.Namespace) -> int:
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
    from wamdiff2_ros.errors import Wamdiff2Error

    started = time.perf_counter()
    try:
        temperature = (
            args.temperature if args.temperature is not None else (1.0 if args.candidates > 1 else 0.0)
        )
        config = DecodeConfig(
            block_size=args.block_size,
            steps=args.steps,
            commit_rule=args.remasking,
            threshold=args.threshold,
            temperature=temperature,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
            candidates=args.candidates,
            cache_order=args.cache_order,
            grammar=not args.no_grammar,
            max_step_m=args.max_step_m,
        )
        inputs = DrivingInputs(
            image_rgb=_read_image(args.image),
            command=args.command,
            velocity_mps=tuple(args.velocity),
            acceleration_mps2=tuple(args.acceleration),
        )
        planner = Planner.from_settings(
            config, checkpoint=args.checkpoint, preset=args.preset, device=args.device, dtype=args.dtype
        )
        load_s = time.perf_counter() - started
        result = planner.plan(inputs)
    except Wamdiff2Error as error:
        print(f"wamdiff2 plan: {error}", file=sys.stderr)
        return 2
    stats = result.decode
    answer_tokens = max(len(c.token_ids) for c in stats.candidates) or 1
    parsed = [c.waypoints_ego for c in result.candidates if c.waypoints_ego is not None]
    report = {
        "model": planner.loaded.source,
        "waypoints": parsed[0].round(2).tolist() if parsed else None,
        "candidates": [
            {
                "seed": c.seed,
                "text": c.text,
                "waypoints": None if c.waypoints_ego is None else c.waypoints_ego.round(2).tolist(),
                "error": c.parse_error or None,
            }
            for c in result.candidates
        ],
        "forwards": stats.forwards,
        "steps_per_block": list(stats.steps_per_block),
        "prompt_tokens": stats.prompt_tokens,
        "answer_tokens": answer_tokens,
        "load_s": round(load_s, 3),
        "prefill_s": round(stats.prefill_s, 4),
        "decode_s": round(stats.latency_s, 4),
        "ms_per_token": round(1000 * (stats.latency_s - stats.prefill_s) / answer_tokens, 3),
        "config": vars(config),
    }
    if args.json:
        print(json.dumps(report))
    else:
        _print_table(report)
    return 0 if report["waypoints"] is not None else 3


def _print_table(report: dict) -> None:
    print(f"model: {report['model']}")
    for index, candidate in enumerate(report["candidates"]):
        print(f"candidate {index} (seed {candidate['seed']}):")
        if candidate["waypoints"] is None:
            print(f"  does not parse: {candidate['error']}")
            print(f"  text: {candidate['text'][:200]!r}")
            continue
        print("   t [s]   x [m]   y [m]   (ego frame: x forward, y left)")
        for step, (x, y) in enumerate(candidate["waypoints"], start=1):
            print(f"  {0.5 * step:5.1f} {x:7.2f} {y:7.2f}")
    print(
        f"forwards {report['forwards']} (steps per block {report['steps_per_block']}), "
        f"prompt {report['prompt_tokens']} tokens, answer {report['answer_tokens']} tokens"
    )
    print(
        f"time: load {report['load_s']:.2f} s, prefill {report['prefill_s'] * 1000:.1f} ms, "
        f"decode {report['decode_s'] * 1000:.1f} ms total "
        f"({report['ms_per_token']:.2f} ms/token after prefill)"
    )
