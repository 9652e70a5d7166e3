"""What a wider render would cost the bundled model on the CPU: `Planner.plan` (the node's call, its
defaults: K = 4, B32 S8, grammar) on a 1920x1080 frame at several pixel budgets, per stage.

The bundled model sees 256x144 (36,864 px); a model trained on wider renders would see more of the junction
ahead. Decode time depends on the answers (a seeded noise frame), so the per-forward figure is the one to
compare; preprocessing and prefill are what the budget changes.

Usage: python3 tools/probes/pixel_budget_cpu.py [PLANS]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.model.checkpoint import load_checkpoint
from wamdiff2_ros.model.default import default_model_dir
from wamdiff2_ros.model.prompt import min_int_digits_of

SIZES = ((256, 144), (320, 180), (384, 216), (512, 288))


def main() -> None:
    plans = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    loaded = load_checkpoint(default_model_dir(), dtype="fp32")
    frame = np.random.default_rng(0).integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)
    config = DecodeConfig(
        block_size=32, steps=8, grammar=True, candidates=4, temperature=0.7, greedy_first=True,
        min_int_digits=min_int_digits_of(loaded.model.config),
    )  # fmt: skip
    inputs = DrivingInputs(frame, "straight", (10.0, 0.0), (0.0, 0.0))
    for width, height in SIZES:
        planner = Planner(loaded, config, max_pixels=width * height)
        for _ in range(3):  # warm-up
            planner.plan(inputs)
        seconds, stages, forwards = [], [], []
        for _ in range(plans):
            started = time.perf_counter()
            output = planner.plan(inputs)
            seconds.append(time.perf_counter() - started)
            stages.append(output.stages_s)
            forwards.append(output.decode.forwards)
        ms = {stage: 1e3 * float(np.median([s[stage] for s in stages])) for stage in stages[0]}
        count = float(np.median(forwards))
        print(
            f"{width}x{height}: plan p50 {1e3 * np.median(seconds):.1f} ms, "
            f"preprocess {ms['preprocess']:.1f}, prefill {ms['prefill'] + ms['vision']:.1f}, "
            f"decode {ms['decode']:.1f} in {count:.0f} forwards ({ms['decode'] / count:.1f} ms each)"
        )


if __name__ == "__main__":
    main()
