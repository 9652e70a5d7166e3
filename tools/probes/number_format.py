"""Do variable-length numbers cause the B32 student's glitches? A controlled experiment (issue 8).

A plan's values are written ``-?(0|[1-9][0-9]*).[0-9][0-9]``, so the integer part has 1 or 2 (rarely 3)
digits and where each value's tokens sit depends on the values before it. Block diffusion commits tokens of
a block out of order: a student that lays out ``1.08`` where the scene needs ``10.05`` writes a grammatical
plan with a 9 m jump. ``padded`` writes every integer part with at least two digits (``05.00,-00.12``; ``,-``
is one Qwen token), which fixes 5 tokens per value for |v| < 100 m (99.9 % of the default scenes' values).

``make SRC OUT --samples N``: OUT/plain (the first N scenes of a ``wamdiff2 sim generate`` folder, all three
tasks) and OUT/padded (the same, planning answers padded; images shared through ``../plain``).
``glitches DATA REFERENCE=PRED NAME=PRED ...``: per predictions file (``wamdiff2 eval predict`` output) the
ADE, the share of plans whose speed jumps by more than 8 m/s between consecutive 0.5 s steps
(``eval.metrics.speed_jump``; no expert plan does), and each model's ADE over the reference's on all plans and
on the plans without a jump.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from wamdiff2_ros.eval.metrics import speed_jump
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.model.prompt import format_waypoints


def padded(answer: str) -> str:
    """A plan's answer text with every integer part at least two digits wide."""
    return format_waypoints(parse_waypoints(answer), min_int_digits=2)


def make(source: Path, out: Path, samples: int) -> None:
    plain, pad = out / "plain", out / "padded"
    for folder in (plain / "images", pad):
        folder.mkdir(parents=True, exist_ok=True)
    planning = json.loads((source / "planning.json").read_text())[:samples]
    images = {path for record in planning for path in record["image"]}
    for path in images:
        shutil.copy(source / path, plain / path)
    for task in ("planning", "detection", "qa"):
        records = [r for r in json.loads((source / f"{task}.json").read_text()) if r["image"][0] in images]
        (plain / f"{task}.json").write_text(json.dumps(records))
        shared = []
        for record in records:
            record = record | {"image": [f"../plain/{path}" for path in record["image"]]}
            if task == "planning":
                turns = record["conversations"]
                record["conversations"] = [*turns[:-1], turns[-1] | {"value": padded(turns[-1]["value"])}]
            shared.append(record)
        (pad / f"{task}.json").write_text(json.dumps(shared))
    print(f"{out}: {len(planning)} scenes, plain and padded")


def glitches(data: Path, predictions: list[str]) -> None:
    truth = {
        r["id"]: parse_waypoints(r["conversations"][-1]["value"])
        for r in json.loads((data / "planning.json").read_text())
    }
    plans = {}
    for spec in predictions:
        name, path = spec.split("=", 1)
        plans[name] = {}
        for key, text in json.loads(Path(path).read_text()).items():
            try:
                plans[name][key] = parse_waypoints(text)
            except ValueError:
                continue  # a plan that does not parse counts as missing
    reference = next(iter(plans))
    keys = sorted(set(truth).intersection(*plans.values()))
    ade = {
        n: np.array([np.linalg.norm(p[k] - truth[k], axis=1).mean() for k in keys]) for n, p in plans.items()
    }
    jumped = {n: np.array([speed_jump(p[k]) for k in keys]) for n, p in plans.items()}
    print(f"{len(keys)} scenes every model planned (of {len(truth)}); reference {reference}")
    for name in plans:
        clean = ~jumped[name]
        clean_ratio = ade[name][clean].mean() / ade[reference][clean].mean()
        print(
            f"{name:>16}: parsed {len(plans[name])}, ADE {ade[name].mean():.3f}, jump rate "
            f"{jumped[name].mean():.3f}, ADE / reference {ade[name].mean() / ade[reference].mean():.3f}, on "
            f"its {clean.sum()} plans without a jump {clean_ratio:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make_parser = sub.add_parser("make")
    make_parser.add_argument("source", type=Path)
    make_parser.add_argument("out", type=Path)
    make_parser.add_argument("--samples", type=int, default=3000)
    glitch_parser = sub.add_parser("glitches")
    glitch_parser.add_argument("data", type=Path)
    glitch_parser.add_argument("predictions", nargs="+", help="NAME=FILE, the first is the reference")
    args = parser.parse_args()
    if args.command == "make":
        make(args.source, args.out, args.samples)
    else:
        glitches(args.data, args.predictions)


if __name__ == "__main__":
    main()
