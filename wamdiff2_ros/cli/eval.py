"""``wamdiff2 eval open-loop|closed-loop|predict|paired|paired-drive``: score planners, always beside the
expert and constant velocity; decode a checkpoint over a dataset's records; compare two planners sample by
sample or episode by episode.

Each verb parses, calls one function of ``wamdiff2_ros.eval``, writes its outputs (``report.json`` and PNG
plots into ``--out``, or the answers file) and prints a table or summary. Heavy imports happen inside the
verbs.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from wamdiff2_ros.decoding.config import PLAN_STEPS, WEIGHT_FORMATS

OPEN_LOOP_COLUMNS = (
    "ade_m",
    "fde_m",
    "collision_rate",
    "jump_rate",
    "no_collision",
    "drivable_area",
    "time_to_collision",
    "comfort",
    "ego_progress",
    "pdm_score",
)
CLOSED_LOOP_COLUMNS = (
    "driving_score",
    "route_completion",
    "collision_rate",
    "off_road_rate",
    "completed_rate",
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate planners open-loop on generated data or closed-loop in the simulator",
        description="Metrics and their formulas: docs/METRICS.md. The expert and constant velocity are "
        "reported with every evaluation.",
    )
    verbs = parser.add_subparsers(dest="eval_verb", metavar="VERB", required=True)
    open_loop = verbs.add_parser(
        "open-loop",
        help="L2/ADE/FDE, collisions and PDM-style scores on a 'sim generate' folder",
        description="Score waypoint predictions against ground_truth.jsonl of a dataset folder.",
    )
    open_loop.add_argument("--data", type=Path, required=True, help="a 'wamdiff2 sim generate' output folder")
    open_loop.add_argument(
        "--predictions",
        type=Path,
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a planner's answers: records like planning.json with the gpt turn replaced, or a JSON object "
        "id -> 'x1,y1,...,x8,y8'; repeatable; NAME= is optional (default: the file stem)",
    )
    open_loop.add_argument(
        "--detections",
        type=Path,
        default=None,
        metavar="FILE",
        help="a model's detection answers (records like detection.json, answers replaced): adds COCO mAP",
    )
    open_loop.add_argument(
        "--answers",
        type=Path,
        default=None,
        metavar="FILE",
        help="a model's QA answers (records like qa.json, answers replaced): adds exact match",
    )
    open_loop.add_argument(
        "--smoothing",
        type=float,
        default=0.0,
        help="score each planner's plans smoothed with this weight from the sample's ego velocity, as the "
        "planner node publishes them with output.smoothing (default 0: as answered)",
    )
    open_loop.add_argument("--out", type=Path, default=None, help="write report.json and plots here")
    open_loop.add_argument(
        "--plots", type=int, default=4, help="trajectory-over-image plots to draw (default 4)"
    )
    open_loop.set_defaults(func=run_open_loop)
    closed_loop = verbs.add_parser(
        "closed-loop",
        help="drive seeded episodes with a policy in the loop; route completion, infractions, driving score",
        description="Each policy drives the same seeded episodes (planning at --plan-hz, control at 10 Hz).",
    )
    closed_loop.add_argument(
        "--policy",
        action="append",
        choices=("expert", "constant-velocity", "model", "model-scored"),
        default=None,
        help="policy to drive (repeatable; default both baselines); model: --model, else the bundled "
        "default, driving its greedy plan; model-scored: as the planner and scorer nodes run together (4 "
        "candidates, a detection answer every --detect-every plans, the online scorer's pick)",
    )
    _add_episode_arguments(closed_loop)
    closed_loop.add_argument(
        "--detect-every",
        type=int,
        default=None,
        help="model-scored: plans between detection answers (default 2: at the harness's 2 Hz, once a "
        "second, the node's cadence at 5 Hz with its output.detections_every_n 5; reports before "
        "2026-12-08 used 5)",
    )
    closed_loop.add_argument(
        "--smoothing",
        type=float,
        default=0.0,
        help="model policies: weight of the plan smoother (the node's output.smoothing; default 0: the "
        "decoded waypoints)",
    )
    closed_loop.add_argument(
        "--no-scorer-stop",
        dest="scorer_stop",
        action="store_false",
        help="model-scored: never drive the scorer's own stop (the node's scorer stop_when_blocked false); "
        "when every candidate hits a detected car the best-scored one is driven",
    )
    closed_loop.add_argument(
        "--workers", type=int, default=1, help="CPU processes driving episodes side by side (default 1)"
    )
    closed_loop.add_argument("--episodes", type=int, default=10, help="episodes per policy (default 10)")
    closed_loop.add_argument("--seed", type=int, default=0, help="first scene seed (default 0)")
    closed_loop.add_argument("--out", type=Path, default=None, help="write report.json here")
    closed_loop.set_defaults(func=run_closed_loop)
    _add_trace(verbs)
    _add_predict(verbs)
    _add_paired(verbs)
    _add_paired_drive(verbs)


def _add_episode_arguments(parser: argparse.ArgumentParser) -> None:
    """The model policy's and the episodes' settings, shared by closed-loop and trace."""
    parser.add_argument("--model", default="", help="checkpoint folder of the model policy")
    parser.add_argument("--block-size", type=int, default=32, help="model policy's block size B")
    parser.add_argument("--steps", type=int, default=PLAN_STEPS, help="model policy's steps per block")
    parser.add_argument(  # no choices: the rule registry imports torch (DecodeConfig refuses an unknown rule)
        "--commit-rule",
        default=None,
        help="model policy's commit rule (default: the decoder's, low_confidence_dynamic; also "
        "low_confidence_static, sequential)",
    )
    parser.add_argument(
        "--image-width", type=int, default=640, help="rendered camera width for the model (default 640)"
    )
    kinds = ("highway", "intersection", "roundabout")
    parser.add_argument("--kind", choices=kinds, default=None, help="scene kind")
    parser.add_argument("--route-m", type=float, default=120.0, help="route length in metres (default 120)")
    parser.add_argument("--max-s", type=float, default=40.0, help="time limit per episode (default 40 s)")
    parser.add_argument("--plan-hz", type=float, default=2.0, help="planning rate (default 2 Hz)")


def _add_trace(verbs: argparse._SubParsersAction) -> None:
    trace = verbs.add_parser(
        "trace",
        help="one closed-loop episode, each plan beside the expert's plan from the same state",
        description="Drives one seeded episode as closed-loop does and prints, every --every seconds, the "
        "ego's speed, the route command and the end points (4 s and 2 s ahead) of the policy's plan and "
        "of the expert's from the same state: where a failed episode left the expert (a standing start it "
        "never leaves, a turn it does not take). --out writes every plan, waypoints and all, as JSON lines.",
    )
    trace.add_argument(
        "--policy", choices=("expert", "constant-velocity", "model"), default="model", help="policy to trace"
    )
    trace.add_argument("--seed", type=int, default=1000, help="scene seed (default 1000)")
    trace.add_argument("--every", type=float, default=1.0, help="seconds between printed lines (default 1)")
    trace.add_argument(
        "--samples",
        type=int,
        default=0,
        help="model policy: also sample this many plans from each frame (not driven) and count those that "
        "end within 3 m of the expert's 4 s point (default 0)",
    )
    trace.add_argument(
        "--temperature", type=float, default=1.0, help="the sampled plans' temperature (default 1)"
    )
    _add_episode_arguments(trace)
    trace.add_argument("--out", type=Path, default=None, help="write every plan here (JSON lines)")
    trace.set_defaults(func=run_trace)


def _add_predict(verbs: argparse._SubParsersAction) -> None:
    predict = verbs.add_parser(
        "predict",
        help="decode a checkpoint over one task file of a 'sim generate' folder (answers for open-loop)",
        description="planning writes {id: answer} (for open-loop --predictions); detection and qa write the "
        "task file's records with the answers replaced (--detections / --answers). Planning and detection "
        "decode under their grammar, so every answer has its format (a detection box may still have x1 > x2 "
        "or y1 > y2: scoring drops such items); images are resized with the checkpoint's own "
        "pixel budget. A summary (forwards per answer, tokens per forward, seconds per answer) goes to "
        "OUT.summary.json.",
    )
    predict.add_argument("checkpoint", help="checkpoint folder")
    predict.add_argument("data", type=Path, help="a 'wamdiff2 sim generate' folder")
    predict.add_argument("out", type=Path, help="answers file to write")
    predict.add_argument(
        "--task", choices=("planning", "detection", "qa"), default="planning", help="task file to decode"
    )
    predict.add_argument("--block-size", type=int, default=32, help="block size B (default 32)")
    predict.add_argument("--steps", type=int, default=0, help="denoising steps per block (0: B)")
    # No choices: the rule registry imports torch, and building the parser must not; DecodeConfig refuses
    # an unknown rule with the registered ones.
    predict.add_argument(
        "--rule",
        default="low_confidence_dynamic",
        help="commit rule: low_confidence_dynamic (default), low_confidence_static, sequential, or another "
        "registered one",
    )
    predict.add_argument("--threshold", type=float, default=0.9, help="the dynamic rule's threshold")
    predict.add_argument("--samples", type=int, default=0, help="the first N records (0: all)")
    predict.add_argument(
        "--candidates",
        type=int,
        default=1,
        help="detection: answers decoded together, the first greedy, the others sampled at --temperature, "
        "their boxes fused when scored, as the planner node does (default 1); other tasks decode one",
    )
    predict.add_argument(
        "--temperature", type=float, default=0.7, help="the sampled answers' temperature (default 0.7)"
    )
    predict.add_argument("--no-grammar", action="store_true", help="decode unconstrained (may not parse)")
    predict.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32", help="weights dtype")
    predict.add_argument(
        "--backend",
        choices=("eager", "sdpa"),
        default="eager",
        help="decoder forward: eager (transformers, the reference; default) or sdpa (the fast path)",
    )
    predict.add_argument(
        "--weights",
        choices=WEIGHT_FORMATS,
        default="bf16",
        help="text-layer weights on the fast path (needs sdpa): the model's own (default), fp8 (W8A8) or "
        "fp8_weight_only (W8A16)",
    )
    predict.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    predict.set_defaults(func=run_predict)


def _add_paired(verbs: argparse._SubParsersAction) -> None:
    paired = verbs.add_parser(
        "paired",
        help="a planner's ADE relative to a reference's on the same samples, with a paired interval",
        description="Each DATA=FILE is a 'sim generate' folder and a predictions file for it; the sets are "
        "pooled. Prints the ratio of mean ADEs, its 90 %% interval over resamples of the samples, and the "
        "ratio on each set alone.",
    )
    paired.add_argument(
        "--reference",
        nargs="+",
        required=True,
        metavar="DATA=FILE",
        help="the reference planner's predictions",
    )
    paired.add_argument(
        "--planner", nargs="+", required=True, metavar="DATA=FILE", help="the compared planner's predictions"
    )
    paired.add_argument("--resamples", type=int, default=5000, help="bootstrap resamples (default 5000)")
    paired.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    paired.set_defaults(func=run_paired)


def _add_paired_drive(verbs: argparse._SubParsersAction) -> None:
    paired = verbs.add_parser(
        "paired-drive",
        help="a policy's closed-loop driving score against a reference's on the same episodes, paired",
        description="Each REPORT:POLICY is a closed-loop report.json and one of its policies (the two may "
        "come from different runs over the same seeds); several per side are pooled (e.g. the held-out and "
        "the fresh episodes: their seeds must not repeat). Prints both mean driving scores, their difference "
        "and its 90 %% interval over resamples of the episodes, then the scores by scene kind, each failure "
        "mode's count and how the reference's failures changed.",
    )
    paired.add_argument(
        "--reference", required=True, nargs="+", metavar="REPORT:POLICY", help="the reference policy"
    )
    paired.add_argument(
        "--planner", required=True, nargs="+", metavar="REPORT:POLICY", help="the compared policy"
    )
    paired.add_argument("--resamples", type=int, default=5000, help="bootstrap resamples (default 5000)")
    paired.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    paired.set_defaults(func=run_paired_drive)


def run_predict(args: argparse.Namespace) -> int:
    import torch

    from wamdiff2_ros.decoding.config import DecodeConfig
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

    if args.threads:
        torch.set_num_threads(args.threads)
    check_command_rules(Path(args.checkpoint), args.data)  # prompts in another rule score the mismatch
    loaded = load_checkpoint(args.checkpoint, dtype=args.dtype)
    min_pixels, max_pixels = read_pixel_budget(args.checkpoint) or (MIN_PIXELS, loaded.max_pixels)
    records = load_records(args.data / f"{args.task}.json", args.task)[: args.samples or None]
    config = DecodeConfig(
        block_size=args.block_size,
        steps=args.steps or args.block_size,
        max_new_tokens=MAX_NEW_TOKENS[args.task],
        commit_rule=args.rule,
        threshold=args.threshold,
        grammar=not args.no_grammar,
        min_int_digits=min_int_digits_of(loaded.model.config),  # the number style it was trained on
        backend=args.backend,
        weights=args.weights,
        candidates=args.candidates,
        temperature=args.temperature if args.candidates > 1 else 0.0,
        greedy_first=True,
    )
    predictions = predict_records(
        loaded.model, loaded.tokenizer, records, config, min_pixels=min_pixels, max_pixels=max_pixels
    )
    args.out.write_text(json.dumps(answers_file(args.task, args.data, predictions), indent=1) + "\n")
    summary = {
        "checkpoint": args.checkpoint,
        "task": args.task,
        "block_size": args.block_size,
        "steps": config.steps,
        "rule": args.rule,
        "threshold": args.threshold,
        "grammar": config.grammar,
        "candidates": config.candidates,
        "temperature": config.temperature,
        **cost_summary(predictions),
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        "backend": args.backend,
        "weights": args.weights,
    }
    Path(f"{args.out}.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


def run_paired(args: argparse.Namespace) -> int:
    import numpy as np

    from wamdiff2_ros.eval.paired import paired_ratio, sample_ade

    def pooled(specs: list[str]) -> list[tuple[str, np.ndarray]]:
        pairs = (spec.split("=", 1) for spec in specs)
        return [(data, sample_ade(Path(data), Path(file))) for data, file in pairs]

    reference, planner = pooled(args.reference), pooled(args.planner)
    result = paired_ratio(
        np.concatenate([ade for _, ade in planner]),
        np.concatenate([ade for _, ade in reference]),
        resamples=args.resamples,
    )
    result["sets"] = {
        data: {"samples": len(mine), "ratio": float(mine.mean() / theirs.mean())}
        for (data, mine), (_, theirs) in zip(planner, reference, strict=True)
    }
    ade, reference_ade = result["ade_m"], result["reference_ade_m"]
    print(f"samples {result['samples']}: ADE {ade:.3f} vs reference {reference_ade:.3f} m")
    print(f"ratio {result['ratio']:.3f}, 90 % interval {result['low']:.3f} - {result['high']:.3f}")
    for data, one in result["sets"].items():
        print(f"  {data}: ratio {one['ratio']:.3f} ({one['samples']} samples)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def run_paired_drive(args: argparse.Namespace) -> int:
    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.eval.paired import driving_scores, failure_changes, paired_difference, policy_episodes

    def episodes(specs: list[str]) -> dict[int, dict]:
        pooled: dict[int, dict] = {}
        for spec in specs:
            report, _, policy = spec.rpartition(":")
            if not report:
                raise InputError(f"expected REPORT:POLICY, got {spec!r}")
            more = policy_episodes(Path(report), policy)
            if repeated := sorted(set(pooled) & set(more)):
                raise InputError(f"{spec} repeats seeds of the reports before it (e.g. {repeated[0]})")
            pooled |= more
        return pooled

    planner, reference = episodes(args.planner), episodes(args.reference)
    result = paired_difference(driving_scores(planner), driving_scores(reference), resamples=args.resamples)
    names = {"planner": " + ".join(args.planner), "reference": " + ".join(args.reference)}
    result |= names | failure_changes(planner, reference)
    print(
        f"episodes {result['episodes']}: driving score {result['score']:.3f} vs reference "
        f"{result['reference_score']:.3f}"
    )
    low, high = result["low"], result["high"]
    print(f"difference {result['difference']:+.3f}, 90 % interval {low:+.3f} .. {high:+.3f}")
    for kind, row in result["by_kind"].items():
        print(f"  {kind} ({row['episodes']}): {row['score']:.3f} vs {row['reference_score']:.3f}")
    counts = ", ".join(f"{m} {c['reference']} -> {c['planner']}" for m, c in result["failure_modes"].items())
    print(f"failure modes (reference -> planner): {counts}")
    for change, count in result["changes"].items():
        print(f"  {change}: {count}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _table(rows: dict[str, dict], columns: tuple[str, ...]) -> str:
    width = max(len(name) for name in rows) + 2
    lines = [" " * width + "".join(f"{c:>18}" for c in columns)]
    lines += [f"{name:<{width}}" + "".join(f"{row[c]:>18.3f}" for c in columns) for name, row in rows.items()]
    return "\n".join(lines)


def _named(spec: Path) -> tuple[str, Path]:
    text = str(spec)
    if "=" in text:
        name, path = text.split("=", 1)
        return name, Path(path)
    return spec.stem, spec


def run_open_loop(args: argparse.Namespace) -> int:
    from wamdiff2_ros.eval.open_loop import (
        evaluate_open_loop,
        load_predictions,
        load_truth,
        score_detections,
        score_qa,
        smoothed_predictions,
    )

    planners = {name: load_predictions(path) for name, path in map(_named, args.predictions)}
    if args.smoothing:
        truth = load_truth(args.data)
        planners = {name: smoothed_predictions(truth, p, args.smoothing) for name, p in planners.items()}
    report = evaluate_open_loop(args.data, planners)
    print(_table(report["planners"], OPEN_LOOP_COLUMNS))
    if args.detections:
        report["detection"] = score_detections(args.data, args.detections)
        print("detection: " + json.dumps(report["detection"]))
    if args.answers:
        report["qa"] = score_qa(args.data, args.answers)
        print("qa: " + json.dumps(report["qa"]))
    if args.out:
        _write_open_loop_outputs(args, report, planners)
    return 0


def _write_open_loop_outputs(args: argparse.Namespace, report: dict, planners: dict) -> None:
    import cv2

    from wamdiff2_ros.eval.open_loop import baseline_predictions, load_truth
    from wamdiff2_ros.eval.plots import plot_l2_per_waypoint, plot_trajectories_on_image
    from wamdiff2_ros.sim.dataset import load_camera

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    plot_l2_per_waypoint(report["planners"], args.out / "l2_per_waypoint.png")
    truth = load_truth(args.data)
    everyone = baseline_predictions(truth) | planners
    camera = load_camera(args.data)
    for sample_id in list(truth)[: args.plots]:
        image = cv2.cvtColor(cv2.imread(str(args.data / "images" / f"{sample_id}.png")), cv2.COLOR_BGR2RGB)
        trajectories = {name: preds[sample_id] for name, preds in everyone.items() if sample_id in preds}
        title = f"{sample_id}: command {truth[sample_id].command}"
        plot_trajectories_on_image(
            image, camera, trajectories, args.out / f"trajectories_{sample_id}.png", title
        )
    print(f"wrote {args.out / 'report.json'} and plots")


def _episode_config(args: argparse.Namespace):
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig

    return ClosedLoopConfig(
        route_length_m=args.route_m,
        max_duration_s=args.max_s,
        plan_hz=args.plan_hz,
        camera=Camera().scaled_to_width(args.image_width),
    )


def run_closed_loop(args: argparse.Namespace) -> int:
    from wamdiff2_ros.eval.model_policy import closed_loop_report

    names = args.policy or ["expert", "constant-velocity"]
    config = _episode_config(args)
    seeds = list(range(args.seed, args.seed + args.episodes))
    settings = (args.model or None, args.block_size, args.steps, args.detect_every)
    report = closed_loop_report(
        names,
        seeds,
        config,
        *settings,
        kind=args.kind,
        workers=args.workers,
        commit_rule=args.commit_rule,
        smoothing=args.smoothing,
        scorer_stop=args.scorer_stop,
    )
    print(_table({n: p["summary"] for n, p in report["policies"].items()}, CLOSED_LOOP_COLUMNS))
    for name, policy in report["policies"].items():
        shared = policy["summary"].get("failure_modes_expert_too")
        also = "" if shared is None else f" (the expert's too on the same seeds: {json.dumps(shared)})"
        print(f"{name} failure modes: {json.dumps(policy['summary']['failure_modes'])}{also}")
    for name in (n for n in names if n.startswith("model")):
        counters = {k: v for k, v in report["policies"][name].items() if k not in ("summary", "episodes")}
        print(f"{name}: {json.dumps(counters)}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out / 'report.json'}")
    return 0


def run_trace(args: argparse.Namespace) -> int:
    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.eval.baselines import baseline_factory
    from wamdiff2_ros.eval.model_policy import ModelPolicySource
    from wamdiff2_ros.eval.trace import trace_episode

    config = _episode_config(args)
    sampler = None
    if args.policy == "model":
        source = ModelPolicySource(
            args.model or None,
            False,
            config.camera,
            args.block_size,
            args.steps,
            commit_rule=args.commit_rule,
        )
        factory = source()
        if args.samples:
            sampler = source.sampling(args.samples, args.temperature).candidates
    elif args.samples:
        raise InputError("--samples samples the model policy's plans: use it with --policy model")
    else:
        factory = baseline_factory(args.policy)
    result, points = trace_episode(args.seed, factory, config, args.kind, sampler)
    ending = f"{result.end_reason}, route completion {result.route_completion:.2f}"
    print(f"seed {result.seed} ({result.kind}): {ending}")
    header = "    t s  speed  command        policy 4 s (x, y)  2 s x   expert 4 s (x, y)  2 s x"
    print(header + ("  sampled near expert" if sampler else ""))
    shown = -math.inf
    for point in points:
        if point.time_s + 1e-9 < shown + args.every:
            continue
        shown = point.time_s
        plan, expert = point.plan, point.expert
        print(
            f"  {point.time_s:5.1f}  {point.speed_mps:5.1f}  {point.command:13s}  "
            f"{plan[-1, 0]:6.1f} {plan[-1, 1]:6.1f}  {plan[3, 0]:6.1f}   "
            f"{expert[-1, 0]:6.1f} {expert[-1, 1]:6.1f}  {expert[3, 0]:6.1f}"
            + (f"  {point.near_expert():>8d} / {len(point.samples)}" if sampler else "")
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(point.row()) + "\n" for point in points))
        print(f"wrote {args.out}")
    return 0
