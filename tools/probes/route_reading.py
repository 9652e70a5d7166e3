"""Does a ``branch_route`` model read the route? Its greedy plans of the held-out samples whose expert plan
ends ``MIN_LATERAL_M`` or more to a side, planned three times: with the sample's own route, with a straight
route and with the route mirrored; the lateral ends (signed towards the expert's side) by command and side.
A model that reads the route bends with its own route and less (or the other way) with the others.

Usage: python3 tools/probes/route_reading.py DATA_DIR MODEL_DIR
(DATA_DIR a ``sim generate`` folder in the ``branch_route`` rule; CPU, ~1 min for 300 samples)
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from PIL import Image

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.eval.open_loop import load_truth
from wamdiff2_ros.model.prompt import STRAIGHT_ROUTE_AHEAD_M

MIN_LATERAL_M = 3.0
MIRROR = np.array([1.0, -1.0])


def main() -> None:
    data, model = Path(sys.argv[1]), sys.argv[2]
    truth = load_truth(str(data))
    lines = (json.loads(line) for line in (data / "ground_truth.jsonl").read_text().splitlines())
    images = {line["id"]: line["image"] for line in lines}
    config = DecodeConfig(block_size=32, steps=8, grammar=True)
    planner = Planner.from_settings(config, checkpoint=model, device="cpu")
    groups: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    for sample, true in truth.items():
        side = float(np.sign(true.waypoints_ego[-1, 1]))
        if abs(true.waypoints_ego[-1, 1]) < MIN_LATERAL_M:
            continue
        image = np.asarray(Image.open(data / images[sample]).convert("RGB"))
        ends = []
        for route in (true.route_ahead_m, STRAIGHT_ROUTE_AHEAD_M, true.route_ahead_m * MIRROR):
            inputs = DrivingInputs(
                image, true.command, tuple(true.velocity_ego_mps), tuple(true.accel_ego_mps2), None, route
            )
            plan = planner.plan(inputs).candidates[0].waypoints_ego
            ends.append(side * plan[-1, 1] if plan is not None else np.nan)
        key = (true.command, "left" if side > 0 else "right")
        groups[key].append([*ends, side * true.waypoints_ego[-1, 1]])
    print("lateral end towards the expert's side, m: own route / straight route / mirrored route / expert")
    for (command, side), rows in sorted(groups.items()):
        means = np.nanmean(np.array(rows), axis=0)
        print(f"  told {command}, bending {side} ({len(rows)}): " + " / ".join(f"{m:.2f}" for m in means))


if __name__ == "__main__":
    main()
