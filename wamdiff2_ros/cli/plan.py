"""``wamdiff2 plan``: plan one front image with a checkpoint or a random-weight preset; print waypoints.

Heavy imports (torch, transformers) happen inside ``run`` so that ``wamdiff2 --help`` stays fast.
``--config FILE`` reads a planner parameter file (config/gpu.yaml, ...) through the node's own parameter
table (``wamdiff2_ros.nodes.params``, which imports no ROS), imported only then.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from wamdiff2_ros.decoding.config import BACKENDS, PLAN_STEPS, PROMPT_ATTENTIONS, WEIGHT_FORMATS

COMMAND_CHOICES = ("left", "straight", "right", "unknown")
PLAN_BACKENDS = (*BACKENDS, "auto")
# Planner parameter -> the option it sets (its dest) when --config FILE names it and the flag is not given.
FROM_CONFIG = {
    "model.device": "device",
    "model.dtype": "dtype",
    "decoder.block_size": "block_size",
    "decoder.steps": "steps",
    "decoder.commit_rule": "remasking",
    "decoder.backend": "backend",
    "decoder.cuda_graphs": "cuda_graphs",
    "decoder.compile": "compile",
    "decoder.weights": "weights",
    "decoder.prompt_attention": "prompt_attention",
    "decoder.threshold": "threshold",
    "decoder.max_new_tokens": "max_new_tokens",
    "decoder.grammar": "grammar",
    "decoder.max_step_m": "max_step_m",
    "candidates.count": "candidates",
    "candidates.temperature": "temperature",
    "candidates.seed": "seed",
    "output.smoothing": "smoothing",
}
# Defaults of those options when neither the flag nor --config gives them (temperature: see _temperature).
DEFAULTS = {
    "device": "cpu",
    "dtype": "fp32",
    "block_size": 32,
    "steps": PLAN_STEPS,
    "remasking": "low_confidence_dynamic",
    "backend": "eager",
    "cuda_graphs": False,
    "compile": False,
    "weights": "bf16",
    "prompt_attention": "auto",
    "threshold": 0.9,
    "max_new_tokens": 128,
    "grammar": True,
    "max_step_m": 20.0,
    "candidates": 1,
    "seed": 0,
    "smoothing": 0.0,
}


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
    parser.add_argument(
        "--command-distance",
        type=float,
        metavar="M",
        help="distance along the route to the command's branch (a model of the branch_distance rule)",
    )
    parser.add_argument(
        "--route",
        nargs=8,  # model.prompt.ROUTE_AHEAD_ARC_M's four points (not imported: the parser stays light)
        type=float,
        metavar="XY",
        help="the route's points 10, 20, 30 and 40 m ahead as x1 y1 ... x4 y4, metres in the route's frame "
        "at the ego (a model of the branch_route rule; straight ahead: 10 0 20 0 30 0 40 0)",
    )
    parser.add_argument(
        "--route-polyline",
        nargs="+",
        type=float,
        metavar="XY",
        help="the route around the ego as x1 y1 x2 y2 ..., metres in the ego frame (x forward, y left), "
        "for a model that writes its plans along the route (model/plan_frame.py; a straight road: -10 0 "
        "130 0)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="checkpoint folder (config.json, *.safetensors, tokenizer)")
    source.add_argument("--preset", default="", help="random-weight preset: tiny, 2b or 8b")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="planner parameter file (ROS 2 YAML, e.g. config/gpu.yaml): its model.device, model.dtype, "
        "decoder.* and candidates.* apply (other keys are the node's own); flags given here win",
    )
    parser.add_argument("--block-size", type=int, help="tokens per block B; 1 = AR (default 32)")
    parser.add_argument("--steps", type=int, help=f"denoising steps per block (default {PLAN_STEPS})")
    # No choices here: the rule registry imports torch, and building the parser must not; DecodeConfig
    # refuses an unknown rule with the list of registered ones.
    parser.add_argument(
        "--remasking",
        help="commit rule: low_confidence_dynamic (default), low_confidence_static, sequential, or another "
        "registered one",
    )
    parser.add_argument("--threshold", type=float, help="dynamic rule threshold (default 0.9)")
    parser.add_argument("--candidates", type=int, help="trajectories decoded in one batch (K, default 1)")
    parser.add_argument(
        "--temperature",
        type=float,
        help="sampling temperature (default 0, or 1 when K > 1; from --config: candidates.temperature "
        "when K > 1, as the node uses it)",
    )
    parser.add_argument("--seed", type=int, help="seed of candidate 0; candidate k uses seed + k (default 0)")
    parser.add_argument("--max-new-tokens", type=int, help="answer budget (default 128)")
    parser.add_argument(
        "--smoothing",
        type=float,
        help="weight of the plan smoother the planner node applies (output.smoothing; default 0: the "
        "waypoints as decoded)",
    )
    parser.add_argument(
        "--cache-order", choices=("fused", "reference"), default="fused", help="KV write order"
    )
    parser.add_argument("--max-step-m", type=float, help="grammar bound per 0.5 s step (m, default 20)")
    parser.add_argument(
        "--grammar",
        action=argparse.BooleanOptionalAction,
        help="constrain the answer so it parses (default on; --no-grammar: unconstrained, may not parse)",
    )
    parser.add_argument(
        "--backend",
        choices=PLAN_BACKENDS,
        help="decoder forward: eager (transformers, the reference; default), sdpa, flashinfer or triton (the "
        "fast path), auto (on a CUDA device in bf16 or fp16: triton where installed, else flashinfer, else "
        "sdpa; otherwise sdpa)",
    )
    parser.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        help="replay CUDA graphs (fast backends on a CUDA device; default off)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the fast backends' lean forward (default off)",
    )
    parser.add_argument(
        "--weights",
        choices=WEIGHT_FORMATS,
        help="text-layer weights of the fast backends: bf16 (the model's own; default), fp8 (opt-in W8A8) "
        "or fp8_weight_only (opt-in W8A16)",
    )
    parser.add_argument(
        "--prompt-attention",
        choices=PROMPT_ATTENTIONS,
        help="the prompt's attention on the fast backends: auto (default: flex on CUDA for flashinfer and "
        "triton, else the backend's own), sdpa, flashinfer or flex (FlexAttention)",
    )
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="weights dtype (default fp32)")
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda (default cpu)")
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


def settings(args: argparse.Namespace) -> tuple[dict, str]:
    """The options ``FROM_CONFIG`` names, resolved: the flag if given, else the --config file's value, else
    ``DEFAULTS``; with the temperature and the concrete backend; and where the device came from.

    Raises:
        InputError: the --config file is unreadable, sets no planner parameters, or sets one badly.
    """
    from wamdiff2_ros.decoding.attention import resolve_backend
    from wamdiff2_ros.errors import InputError

    from_file: dict = {}
    if args.config:
        from wamdiff2_ros.nodes.params import PLANNER_PARAMS, read_parameter_file

        try:
            parameters = read_parameter_file(args.config, "wamdiff2_planner", PLANNER_PARAMS)
        except (OSError, ValueError) as error:
            raise InputError(f"--config {args.config}: {error}") from error
        if not parameters:
            raise InputError(f"--config {args.config} sets no wamdiff2_planner parameters")
        from_file = {FROM_CONFIG[k]: v for k, v in parameters.items() if k in FROM_CONFIG}
    values = {}
    for dest in FROM_CONFIG.values():
        given = getattr(args, dest)
        values[dest] = given if given is not None else from_file.get(dest, DEFAULTS.get(dest))
    if args.temperature is None:
        many = values["candidates"] > 1
        configured = from_file.get("temperature")
        values["temperature"] = (configured if many else 0.0) if configured is not None else float(many)
    values["backend"] = resolve_backend(values["backend"], values["device"], values["dtype"])
    origin = (
        f"model.device in --config {args.config}"
        if args.device is None and "device" in from_file
        else "--device"
    )
    return values, origin


def _require_device(values: dict, origin: str) -> None:
    """InputError naming the device and where it came from when it is CUDA and torch sees no GPU."""
    import torch

    from wamdiff2_ros.errors import InputError

    device = values["device"]
    if device.startswith("cuda") and not torch.cuda.is_available():
        cpu = "--device cpu" + (" --no-cuda-graphs" if values["cuda_graphs"] else "")
        raise InputError(
            f"device {device!r} ({origin}) needs a CUDA GPU, but torch {torch.__version__} finds none "
            f"(torch.cuda.is_available() is False); plan on the CPU with {cpu}"
        )


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
    from wamdiff2_ros.errors import Wamdiff2Error

    started = time.perf_counter()
    try:
        values, origin = settings(args)
        _require_device(values, origin)
        config = DecodeConfig(
            block_size=values["block_size"],
            steps=values["steps"],
            commit_rule=values["remasking"],
            threshold=values["threshold"],
            temperature=values["temperature"],
            seed=values["seed"],
            max_new_tokens=values["max_new_tokens"],
            candidates=values["candidates"],
            cache_order=args.cache_order,
            grammar=values["grammar"],
            max_step_m=values["max_step_m"],
            backend=values["backend"],
            cuda_graphs=values["cuda_graphs"],
            compile=values["compile"],
            weights=values["weights"],
            prompt_attention=values["prompt_attention"],
        )
        inputs = DrivingInputs(
            image_rgb=_read_image(args.image),
            command=args.command,
            velocity_mps=tuple(args.velocity),
            acceleration_mps2=tuple(args.acceleration),
            command_distance_m=args.command_distance,
            route_ahead_m=None if args.route is None else np.reshape(args.route, (-1, 2)),
            route_ego_m=None if args.route_polyline is None else np.reshape(args.route_polyline, (-1, 2)),
        )
        planner = Planner.from_settings(
            config,
            checkpoint=args.checkpoint,
            preset=args.preset,
            device=values["device"],
            dtype=values["dtype"],
            smoothing=values["smoothing"],
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
        "device": values["device"],
        "dtype": values["dtype"],
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
