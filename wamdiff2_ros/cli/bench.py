"""``wamdiff2 bench decode|prefill|node``: decoder speed on random weights of a preset's real shape, and the
planner node's frame-to-trajectory latency.

Speed does not depend on weight values when the number of steps is fixed, so rows use the static commit rule
(exactly S forwards per block) and random weights. Heavy imports happen inside the functions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from wamdiff2_ros.errors import InputError

SUITES = ("quick", "full", "compile")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="decode and prefill speed on random weights of a preset (GPU rows need --device cuda)",
        description="Benchmark the eager and fast decoders (docs/BENCHMARKS.md explains the rows). Prints a "
        "card and a table; --json writes both.",
    )
    parser.add_argument(
        "what",
        choices=("decode", "prefill", "plot", "node", "profile", "plan", "soak", "fp8"),
        help="what to time (plot: draw the chain of --input; node: frame-to-trajectory latency of the "
        "planner node over DDS; profile: kernel time of one graphed B32 S8 step and forward, with and "
        "without compile; plan: camera-to-plan through Planner.plan, the node's own call, per stage; soak: "
        "planner and scorer fed from a looping bag for --minutes, memory, drops and diagnostics over time; "
        "fp8: accuracy of FP8 weights against the model's own on --frames seeded planning prompts: per-layer "
        "hidden error, first-block logits, greedy answers; --preset '' is the bundled model)",
    )
    parser.add_argument("--preset", default="2b", help="model preset (default 2b)")
    parser.add_argument("--device", default="cuda", help="torch device (default cuda)")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="bf16", help="weights dtype")
    parser.add_argument(
        "--image",
        default="1920x1080",
        help="front image size WxH, or several comma-separated (default 1920x1080)",
    )
    parser.add_argument(
        "--suite",
        choices=SUITES,
        default="quick",
        help="quick: headline rows; full: the table; compile: the headline with and without torch.compile",
    )
    parser.add_argument(
        "--attention",
        choices=("auto", "sdpa", "flashinfer", "triton"),
        default="auto",
        help="plan, profile: the fast path's attention backend (default auto: the node's choice, "
        "decoding.attention.resolve_backend: triton on CUDA where Triton is installed)",
    )
    parser.add_argument(
        "--weights",
        choices=("bf16", "fp8", "fp8_weight_only"),
        default="bf16",
        help="plan, profile: the fast path's text-layer weights (default bf16)",
    )
    parser.add_argument(
        "--prompt-attention",
        choices=("auto", "sdpa", "flashinfer", "flex"),
        default="auto",
        help="plan: the fast path's prompt attention (default auto: attention.prompt_backend's choice, flex "
        "on CUDA for flashinfer and triton)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128, help="answer budget (default 128)")
    parser.add_argument(
        "--steps", type=int, default=8, help="plan: denoising steps a block of the fast rows (default 8)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per row (default 5)")
    parser.add_argument("--json", help="write the card and rows to this file")
    parser.add_argument(
        "--input",
        help="plot: JSON files written by --json, comma-separated (later rows replace earlier ones)",
    )
    parser.add_argument("--out", default="docs/decode_latency_chain.png", help="plot: PNG to write")
    parser.add_argument("--rate-hz", type=float, default=2.0, help="node: camera frame rate (default 2)")
    parser.add_argument(
        "--frames", type=int, default=30, help="node: frames to publish; plan: frames timed (default 30)"
    )
    parser.add_argument("--bag", type=Path, help="soak: a bag with CARLA-bridge topics (the demo's drive)")
    parser.add_argument("--minutes", type=float, default=30.0, help="soak: wall minutes to run (default 30)")
    parser.add_argument(
        "--playback-rate",
        type=float,
        default=2.0,
        help="soak: bag speed (2: the demo's 10 Hz camera at 20 Hz)",
    )
    parser.add_argument("--encoding", choices=("bgr8", "bgra8"), default="bgr8", help="node: frame encoding")
    parser.add_argument("--row-padding", type=int, default=0, help="node: bytes after each frame row")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="plan, fp8: the fast path without torch.compile (minutes less setup)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="plan, decode: run only the rows whose name contains one of these comma-separated parts (a part "
        "ending in $ must end the name; e.g. "
        "'K1 grammar,K4 free'): a compiled row's warm-up takes minutes",
    )
    parser.add_argument(
        "--frame", type=Path, help="node: publish this image file (resized to --image), not seeded noise"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="node: a planner parameter over config/planner.yaml (repeatable), e.g. candidates.count=1",
    )
    parser.add_argument(
        "--kernels",
        action="append",
        default=[],
        metavar="NAME=0|1",
        help="decode, plan, profile, prefill: turn one of the fused FP8 forward's kernel switches off or on "
        f"for this run (repeatable; {', '.join(KERNEL_SWITCHES)}), e.g. pdl=0: an A/B on one card",
    )
    parser.set_defaults(func=run)


# --kernels: the fast path's kernel switches, for an A/B of each on one card (docs/DECISIONS.md "FP8 weights")
KERNEL_SWITCHES = {
    "swap_ab": ("wamdiff2_ros.decoding.fp8_fused", "SWAP_AB_ON_CUDA"),
    "pdl": ("wamdiff2_ros.decoding.pdl", "PDL_ON_CUDA"),
}


def set_kernel_switches(items: list[str]) -> dict[str, bool]:
    """Apply ``--kernels NAME=0|1`` items -> every switch's value for this run (for the card).

    Raises:
        InputError: an unknown switch or a value other than 0 or 1.
    """
    import importlib

    for item in items:
        name, _, value = item.partition("=")
        if name not in KERNEL_SWITCHES or value not in ("0", "1"):
            raise InputError(f"--kernels takes NAME=0|1, NAME one of {list(KERNEL_SWITCHES)}: got {item!r}")
        module, attribute = KERNEL_SWITCHES[name]
        setattr(importlib.import_module(module), attribute, value == "1")
    return {
        name: getattr(importlib.import_module(module), attribute)
        for name, (module, attribute) in KERNEL_SWITCHES.items()
    }


def suite_rows(suite: str, flashinfer: bool, graphs: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """Named decode settings of a suite (``low_confidence_static``; fused order unless named).

    Args:
        suite: ``quick``, ``full`` or ``compile``.
        flashinfer: FlashInfer is importable (its rows are skipped otherwise).
        graphs: CUDA graphs are available (rows that need them are dropped otherwise, e.g. on the CPU).

    Returns:
        (row name, DecodeConfig settings) pairs.
    """
    fast = "flashinfer" if flashinfer else "sdpa"
    static = {"commit_rule": "low_confidence_static"}
    best = {**static, "block_size": 32, "backend": fast, "cuda_graphs": True}
    headline = (f"B32 S8 {fast} graphs fused", {**best, "steps": 8})
    rows: list[tuple[str, dict[str, Any]]] = [
        ("AR hf-eager", {"block_size": 1, "steps": 1}),  # fused order: one forward per token
        (f"AR static {fast} graphs", {"block_size": 1, "steps": 1, "backend": fast, "cuda_graphs": True}),
        headline,
    ]
    fp8 = {**best, "steps": 8, "compile": True, "weights": "fp8"}
    compiled = [
        (f"B32 S8 {fast} graphs fused compile", {**best, "steps": 8, "compile": True}),
        (f"B32 S8 {fast} graphs fused compile fp8", fp8),
        (f"B32 S8 {fast} graphs fused compile fp8 weight-only", {**fp8, "weights": "fp8_weight_only"}),
        # the split-keys kernels for the answer's attention, `auto`'s choice on CUDA (Triton ships with CUDA
        # torch, so they are measured with or without FlashInfer)
        (
            "B32 S8 triton graphs fused compile",
            {**best, "steps": 8, "compile": True, "backend": "triton"},
        ),
        (
            "B32 S8 triton graphs fused compile fp8",
            {**fp8, "backend": "triton"},
        ),
        (
            "B32 S8 K8 triton graphs fused compile",
            {**best, "steps": 8, "candidates": 8, "compile": True, "backend": "triton"},
        ),
        (
            "B32 S8 K8 triton graphs fused compile fp8",
            {**fp8, "candidates": 8, "backend": "triton"},
        ),
        (f"B32 S8 K8 {fast} graphs fused compile fp8", {**fp8, "candidates": 8}),
        (f"B32 S8 K8 {fast} graphs fused compile", {**best, "steps": 8, "candidates": 8, "compile": True}),
        (
            f"AR static {fast} graphs compile",
            {"block_size": 1, "steps": 1, "backend": fast, "cuda_graphs": True, "compile": True},
        ),
        (f"B32 S8 K16 {fast} graphs fused compile", {**best, "steps": 8, "candidates": 16, "compile": True}),
        (f"B32 S4 {fast} graphs fused compile", {**best, "steps": 4, "compile": True}),
    ]
    if suite == "quick":
        return _keep(rows, graphs)
    if suite == "compile":  # most telling first: a device call may end before the last row
        return _keep(
            [
                headline,
                *compiled[:9],
                (f"B32 S8 K8 {fast} graphs fused", {**best, "steps": 8, "candidates": 8}),
                *compiled[9:],
            ],
            graphs,
        )
    for size in (4, 8, 16, 32):
        base = {**static, "block_size": size, "steps": 8}
        label = f"B{size} S{min(8, size)}"  # the static rule caps S at B
        rows += [
            (f"{label} hf-eager", {**base, "cache_order": "reference"}),
            (f"{label} {fast}", {**base, "backend": fast, "cache_order": "reference"}),
            (
                f"{label} {fast} graphs",
                {**base, "backend": fast, "cuda_graphs": True, "cache_order": "reference"},
            ),
            (f"{label} {fast} graphs fused", {**base, "backend": fast, "cuda_graphs": True}),
        ]
    rows += [(f"B32 S{steps} {fast} graphs fused", {**best, "steps": steps}) for steps in (4, 16, 32)]
    rows += [(f"B32 S8 K{k} {fast} graphs fused", {**best, "steps": 8, "candidates": k}) for k in (4, 8, 16)]
    if flashinfer:
        rows.append(("B32 S8 sdpa graphs fused", {**best, "steps": 8, "backend": "sdpa"}))
    return _keep(rows + compiled, graphs)


def _keep(rows: list[tuple[str, dict[str, Any]]], graphs: bool) -> list[tuple[str, dict[str, Any]]]:
    # Each name once (the headline row is in both lists); rows needing CUDA graphs only where they exist.
    return [
        (name, settings) for name, settings in dict(rows).items() if graphs or not settings.get("cuda_graphs")
    ]


def _prompt(tokenizer: Any, size: str) -> Any:
    import numpy as np

    from wamdiff2_ros.model.prompt import build_planning_prompt

    width, height = (int(v) for v in size.lower().split("x"))
    image = np.random.default_rng(0).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return build_planning_prompt(tokenizer, image, "straight", (10.0, 0.0), (0.0, 0.0))


# The chain drawn by ``bench plot``: each step adds one technique to the one before.
CHAIN = (
    ("AR hf-eager", "AR\nHF eager"),
    ("B32 S8 hf-eager", "Block-32\nHF eager"),
    ("B32 S8 flashinfer", "+ static cache\n+ FlashInfer"),
    ("B32 S8 flashinfer graphs", "+ CUDA graphs"),
    ("B32 S8 flashinfer graphs fused", "+ fused\ncache order"),
    ("B32 S8 flashinfer graphs fused compile", "+ torch.compile"),
)


def _plot(args: argparse.Namespace) -> int:
    from wamdiff2_ros.decoding.cost import block_floor_ms_per_token
    from wamdiff2_ros.eval.speed import plot_chain
    from wamdiff2_ros.model.presets import preset_config

    if not args.input:
        raise InputError("bench plot needs --input, JSON files written by bench decode --json")
    payloads = [json.loads(Path(path).read_text()) for path in args.input.split(",")]
    prompt = max(payloads[0]["card"]["prompts"].values())
    by_name = {}  # a row of a later file replaces the same row of an earlier one
    for payload in payloads:
        for row in payload["rows"]:
            if row["prompt_tokens"] == prompt:
                by_name[row["name"].rsplit(" P", 1)[0]] = row | {"name": row["name"].rsplit(" P", 1)[0]}
    floor = block_floor_ms_per_token(
        preset_config(payloads[0]["card"]["preset"]).text_config, 32, 8, prompt + 64, False
    )
    chain = [(name, label) for name, label in CHAIN if name in by_name]
    names, labels = zip(*chain, strict=True)
    plot_chain(list(by_name.values()), list(names), list(labels), floor, args.out)
    print(f"wrote {args.out}")
    return 0


def _node(args: argparse.Namespace) -> int:
    import tempfile

    from wamdiff2_ros.nodes.latency_bench import measure

    width, height = (int(v) for v in args.image.split(",")[0].split("x"))
    overrides = {"decoder.max_new_tokens": args.max_new_tokens, "input.max_age_s": 5.0}
    overrides |= dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory() as folder:
        result = measure(
            preset=args.preset,
            device=args.device,
            width=width,
            height=height,
            rate_hz=args.rate_hz,
            frames=args.frames,
            frame=args.frame,
            encoding=args.encoding,
            row_padding=args.row_padding,
            overrides=overrides,
            log=Path(folder) / "planner.log",
        )
    card = {
        "preset": args.preset,
        "device": args.device,
        "image": f"{width}x{height}",
        "rate_hz": args.rate_hz,
        "frame": str(args.frame) if args.frame else "seeded noise",
        "encoding": args.encoding,
        "row_padding": args.row_padding,
        "set": args.set,
    }
    print(json.dumps(card | result))
    if args.json:
        Path(args.json).write_text(json.dumps(card | result, indent=2) + "\n")
    return 0


def _profile(args: argparse.Namespace, model: Any, tokenizer: Any, prompt: Any, fast: str) -> dict[str, Any]:
    # One non-fused denoising step and one 32-token forward, replayed from their CUDA graphs.
    import torch

    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.fast import FastDecoder
    from wamdiff2_ros.eval import speed
    from wamdiff2_ros.model.tokenizer import MASK_ID

    results = {}
    for compile in (False, True):
        settings = {"block_size": 32, "steps": 8, "commit_rule": "low_confidence_static", "backend": fast}
        config = DecodeConfig(
            cuda_graphs=True,
            compile=compile,
            max_new_tokens=args.max_new_tokens,
            weights=args.weights,
            **settings,
        )
        decoder = FastDecoder(model, config, prompt.length)
        decoder.decode(tokenizer, prompt)  # captures the step graphs
        cache = decoder.cache
        forwards = FastDecoder(model, config, prompt.length, device_loop=False).cache  # a graph per forward
        forwards.prefill(prompt)
        forwards.denoise(torch.full((1, 32), MASK_ID, device=model.device))  # captures the forward graph
        graphs = {
            "step": decoder.steps_for(None).graphs[(False, 4)],
            "forward": forwards.graphs.graphs[32][0],
        }
        for name, graph in graphs.items():

            def replay(graph: Any = graph, cache: Any = cache) -> None:
                cache.place(32)
                graph.replay()

            label = f"{name}{' compiled' if compile else ''}"
            results[label] = speed.profile_replays(replay, model.device)
            print(label, json.dumps(results[label]), flush=True)
    return results


def plan_rows(
    suite: str,
    sizes: list[str],
    fast: str,
    compile: bool,
    graphs: bool,
    only: list[str] | None = None,
    weights: str = "bf16",
    prompt_attention: str = "auto",
    steps: int = 8,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, image size, DecodeConfig settings) of ``bench plan``: the node's decode settings (B32 S8,
    dynamic 0.9, 128 tokens; K = 4: candidate 0 greedy, the others at 0.7) on the fast path, grammar on and
    off, K = 1 and 4, every size; ``full`` adds the eager transformers rows at the first size. ``only``:
    the rows whose name contains one of these parts; ``weights``, ``prompt_attention`` and ``steps``: the
    fast rows' weights, prompt attention and denoising steps a block (named at the end unless bf16 / auto /
    8)."""
    base = {"block_size": 32, "steps": 8, "threshold": 0.9, "max_new_tokens": 128, "greedy_first": True}
    fast_path = {"backend": fast, "cuda_graphs": graphs, "compile": compile, "weights": weights}
    fast_path.update(prompt_attention=prompt_attention, steps=steps)
    rows = []
    for index, size in enumerate(sizes):
        for grammar in (True, False) if index == 0 else (True,):
            for k in (1, 4):
                settings = {**base, **fast_path, "grammar": grammar, "candidates": k}
                settings["temperature"] = 0.7 if k > 1 else 0.0
                tag = "grammar" if grammar else "free"
                extras = (" graphs" if graphs else "") + (" compile" if compile else "")
                extras += "" if weights == "bf16" else f" {weights}"
                extras += "" if prompt_attention == "auto" else f" prompt-{prompt_attention}"
                extras += "" if steps == 8 else f" S{steps}"
                rows.append((f"{size} K{k} {tag} {fast}{extras}", size, settings))
    if suite == "full":
        for k in (1, 4):
            settings = {**base, "grammar": True, "candidates": k, "temperature": 0.7 if k > 1 else 0.0}
            settings.update(
                backend="eager", cuda_graphs=False, compile=False, weights="bf16", prompt_attention="auto"
            )  # the reference rows: none of the fast path's options
            rows.append((f"{sizes[0]} K{k} grammar eager", sizes[0], settings))
    return [row for row in rows if selected(row[0], only)]


def selected(name: str, only: list[str] | None) -> bool:
    """Whether ``--only``'s parts pick the row ``name``: no parts, or one it contains (a part ending in ``$``:
    one it ends with)."""
    if not only:
        return True
    return any(name.endswith(part[:-1]) if part.endswith("$") else part in name for part in only)


def _plan(args: argparse.Namespace) -> int:
    import torch

    from wamdiff2_ros.decoding.attention import resolve_backend
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.planner import Planner
    from wamdiff2_ros.eval import plan_bench, speed
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.checkpoint import LoadedModel
    from wamdiff2_ros.model.image import MAX_PIXELS
    from wamdiff2_ros.model.tokenizer import load_tokenizer

    device = torch.device(args.device)
    fast = resolve_backend(args.attention, args.device, args.dtype) if device.type == "cuda" else "sdpa"
    model = build_model(args.preset, seed=0, dtype=args.dtype, device=device)
    loaded = LoadedModel(model=model, tokenizer=load_tokenizer(), source=f"preset:{args.preset}")
    card = {
        **speed.device_card(device), "preset": args.preset, "dtype": args.dtype, "max_pixels": MAX_PIXELS,
        "kernels": args.kernel_switches,
    }  # fmt: skip
    print(json.dumps(card), flush=True)
    sizes = args.image.split(",")
    base: Planner | None = None  # the rows are its with_config copies: they share its fast engine
    rows = []
    graphs = device.type == "cuda"
    only = [part for part in args.only.split(",") if part]
    for name, size, settings in plan_rows(
        args.suite,
        sizes,
        fast,
        not args.no_compile,
        graphs,
        only,
        args.weights,
        args.prompt_attention,
        args.steps,
    ):
        base = base or Planner(loaded, DecodeConfig(**settings), max_pixels=MAX_PIXELS)
        planner = base.with_config(**settings)
        eager = planner.config.backend == "eager"
        width, height = (int(v) for v in size.split("x"))
        row = plan_bench.measure_plan(
            planner, (height, width), max(3, args.frames // 4) if eager else args.frames
        )
        rows.append({"name": name, **row})
        print(json.dumps(rows[-1]), flush=True)
        if args.json:  # after every row, so a run cut short still leaves its rows
            Path(args.json).write_text(json.dumps({"card": card, "rows": rows}, indent=2) + "\n")
    print(plan_bench.format_rows(rows))
    return 0


def _soak(args: argparse.Namespace) -> int:
    import tempfile

    from wamdiff2_ros.nodes.soak import soak

    if args.bag is None:
        raise SystemExit("bench soak needs --bag (e.g. demo_output/scenes/bags/drive_000000 after make demo)")
    with tempfile.TemporaryDirectory() as folder:
        report = soak(
            args.bag,
            minutes=args.minutes,
            rate=args.playback_rate,
            log_dir=Path(folder),
            preset=args.preset if args.preset != "2b" else "",  # bench's default preset is the GPU one
        )
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _fp8(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from wamdiff2_ros.decoding.attention import resolve_backend
    from wamdiff2_ros.eval import fp8_accuracy, speed
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.image import MAX_PIXELS, MIN_PIXELS
    from wamdiff2_ros.model.prompt import COMMAND_RULE_KEY, build_planning_prompt, straight_road_route
    from wamdiff2_ros.model.tokenizer import load_tokenizer

    device = torch.device(args.device)
    if args.preset:
        model, tokenizer = build_model(args.preset, seed=0, dtype=args.dtype, device=device), load_tokenizer()
        min_pixels, max_pixels = MIN_PIXELS, MAX_PIXELS
    else:  # the bundled model, at its own pixel budget
        loaded = load_checkpoint(default_model_dir(), dtype=args.dtype, device=device)
        model, tokenizer = loaded.model, loaded.tokenizer
        min_pixels, max_pixels = read_pixel_budget(default_model_dir())
    width, height = (int(v) for v in args.image.split(",")[0].lower().split("x"))
    route = straight_road_route(getattr(model.config, COMMAND_RULE_KEY, ""))  # a route model reads one
    prompts = []
    for index in range(args.frames):  # a fixed set: seeded frames, ego speeds 0..14 m/s, every command
        image = np.random.default_rng(index).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
        command = ("straight", "left", "right", "unknown")[index % 4]
        velocity = (float(index % 15), 0.0)
        prompt = build_planning_prompt(
            tokenizer,
            image,
            command,
            velocity,
            (0.0, 0.0),
            None,
            route,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
        )
        prompts.append(prompt)
    backend = resolve_backend("auto", args.device)
    card = {
        **speed.device_card(device), "preset": args.preset or "bundled", "dtype": args.dtype,
        "kernels": args.kernel_switches,
    }  # fmt: skip
    card.update(prompts=len(prompts), prompt_tokens=prompts[0].length, backend=backend)
    print(json.dumps(card), flush=True)
    result = fp8_accuracy.measure(model, tokenizer, prompts, backend, compile=not args.no_compile)
    print(json.dumps(result.as_dict()), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"card": card, "fp8": result.as_dict()}, indent=2) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.kernels and args.what in ("node", "soak", "plot"):
        raise InputError("--kernels applies in this process only: decode, plan, profile, prefill, fp8")
    args.kernel_switches = set_kernel_switches(args.kernels)  # on each card
    if args.what == "fp8":
        return _fp8(args)
    if args.what == "plot":
        return _plot(args)
    if args.what == "node":
        return _node(args)
    if args.what == "plan":
        return _plan(args)
    if args.what == "soak":
        return _soak(args)
    import torch

    from wamdiff2_ros.decoding.attention import resolve_backend
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.fast import FastDecoder, lean_decoder, lean_key
    from wamdiff2_ros.decoding.fast_model import LeanDecoder
    from wamdiff2_ros.eval import speed
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.checkpoint import read_pixel_budget
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.image import MAX_PIXELS
    from wamdiff2_ros.model.tokenizer import load_tokenizer

    device = torch.device(args.device)
    tokenizer = load_tokenizer()
    model = build_model(args.preset, seed=0, dtype=args.dtype, device=device)
    card = {
        **speed.device_card(device), "preset": args.preset, "dtype": args.dtype, "batch": 1,
        "kernels": args.kernel_switches,
    }  # fmt: skip
    try:
        import flashinfer  # noqa: F401 (only whether it imports)

        has_flashinfer = device.type == "cuda"
    except ImportError:
        has_flashinfer = False
    prompts = [_prompt(tokenizer, size) for size in args.image.split(",")]
    card["prompts"] = {size: p.length for size, p in zip(args.image.split(","), prompts, strict=True)}
    print(json.dumps(card))
    # Prefill of the fast path (vision tower + lean layers) beside transformers' (the eager rows' prefill).
    backends = ["sdpa", *["flashinfer"] * has_flashinfer, *["flex"] * (device.type == "cuda")]
    prefills = {p.length: speed.measure_prefills(model, p, 32, backends, repeat=args.repeat) for p in prompts}
    budgets = {"reference budget": MAX_PIXELS, "bundled budget": read_pixel_budget(default_model_dir())[1]}
    preprocessing = {}
    for size, prompt in zip(args.image.split(","), prompts, strict=True):
        width, height = (int(v) for v in size.lower().split("x"))
        preprocessing[size] = speed.measure_preprocessing(width, height, device, budgets, repeat=args.repeat)
        for name, timing in preprocessing[size].items():
            print(f"{size} {name}: median {timing.median_ms:.2f} ms, p99 {timing.p99_ms:.2f} ms")
        floors_ms = {"text": speed.text_prefill_flops(model.config.text_config, prompt.length)}
        if prompt.pixel_values is not None:
            floors_ms["vision"] = speed.vision_flops(model.config.vision_config, prompt.pixel_values.shape[0])
        floors_ms = {stage: flops / speed.BF16_DENSE_FLOPS * 1e3 for stage, flops in floors_ms.items()}
        for name, timing in prefills[prompt.length].items():
            median, p99 = timing.median_ms, timing.p99_ms
            stage = name.split()[0]
            note = ""
            if stage in floors_ms and device.type == "cuda":  # the H200's FLOP floor, and the row's share
                note = f" ({stage} floor {floors_ms[stage]:.1f} ms: {floors_ms[stage] / median:.0%} of it)"
            print(f"prefill {prompt.length} tokens, {name}: median {median:.2f} ms, p99 {p99:.2f} ms{note}")
    prefill_json = {
        str(length): {name: timing.__dict__ for name, timing in timings.items()}
        for length, timings in prefills.items()
    }
    extra: dict[str, Any] = {
        "prefill": prefill_json,
        "preprocessing": {
            size: {name: timing.__dict__ for name, timing in timings.items()}
            for size, timings in preprocessing.items()
        },
    }
    rows: list[speed.SpeedRow] = []
    if args.what == "profile":
        fast = resolve_backend(args.attention, args.device, args.dtype) if device.type == "cuda" else "sdpa"
        extra["profile"] = _profile(args, model, tokenizer, prompts[0], fast)
    if args.what == "decode":
        lean: dict[tuple[bool, str], LeanDecoder] = {}  # one per compile and weights, shared by the rows
        only = [part for part in args.only.split(",") if part]
        for prompt in prompts:
            for name, settings in suite_rows(args.suite, has_flashinfer, graphs=device.type == "cuda"):
                if not selected(name, only):
                    continue
                config = DecodeConfig(max_new_tokens=args.max_new_tokens, **settings)
                decoder, prefill = None, prefills[prompt.length]["hf eager"]
                if config.backend != "eager":
                    if lean_key(config) not in lean:
                        lean[lean_key(config)] = lean_decoder(model, config)
                    decoder = FastDecoder(model, config, prompt.length, lean[lean_key(config)])
                    prefill = speed.time_call(
                        lambda d=decoder, p=prompt: d.cache.prefill(p), device, repeat=args.repeat
                    )
                row = speed.measure_decode(
                    f"{name} P{prompt.length}",
                    model,
                    tokenizer,
                    prompt,
                    config,
                    prefill,
                    decoder,
                    repeat=args.repeat,
                )
                row.extra["prefill_ms"] = prefill.median_ms
                rows.append(row)
                print(speed.format_table([row]).splitlines()[-1], flush=True)
                if args.json:  # after every row, so a run cut short still leaves its rows
                    speed.write_json(args.json, card, rows, extra)
                del decoder
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            if args.suite == "full":
                args.suite = "quick"  # later prompts: headline rows only
        print(speed.format_table(rows))
    if args.json:
        speed.write_json(args.json, card, rows, extra)
    sys.stdout.flush()
    return 0
