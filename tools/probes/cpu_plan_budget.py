"""What a bigger model or a wider render would cost on the 2-core CPU (issue 20): `Planner.plan` as the
planner node calls it (its deployment defaults: K = 4, B32 S8, grammar, the fast sdpa path, fp32) on
rendered 1920x1080 frames, per stage.

The bundled model is measured as it is; each other variant is a random-weight model of a candidate shape
(`training.initial.initial_model`, the bundled model's vocabulary and number style) at a pixel budget.
Random weights commit nothing early and
write every row to the token budget, so their forwards cost more than a trained model's of the same shape
(more rows alive, longer answers to attend to): each variant is compared with the random model of the
bundled shape on the same frames, and the bundled model's plan is projected to the variant's shape: its own
time before decoding plus the variant's extra, and its forwards (p50 and p90 over the frames) at its own
cost per forward times the variant's ratio to the random bundled shape. The projection assumes a trained
model of another shape needs as many forwards as the bundled one (the answers have the same tokens).

Usage: python3 tools/probes/cpu_plan_budget.py [PLANS]   (PLANS per variant, default 12; ~1 minute)
"""

from __future__ import annotations

import sys

import numpy as np

from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.checkpoint import LoadedModel, load_checkpoint
from wamdiff2_ros.model.default import default_model_dir
from wamdiff2_ros.model.plan_frame import PLAN_FRAME_KEY
from wamdiff2_ros.model.prompt import COMMAND_RULE_KEY, MIN_INT_DIGITS_KEY
from wamdiff2_ros.model.vocab import read_kept
from wamdiff2_ros.nodes.params import decode_config, node_defaults
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scenes import make_scene
from wamdiff2_ros.training.initial import initial_model

BUNDLED_SHAPE = {"layers": 6, "intermediate": 512, "hidden": 96, "vision_depth": 4, "vision_hidden": 64}
# name: (shape over the bundled one, or None for the bundled model itself; pixel budget (width, height))
VARIANTS = {
    "bundled model": (None, (256, 144)),
    "bundled shape, random": ({}, (256, 144)),
    "bundled shape @ 384x216": ({}, (384, 216)),
    "hidden 128": ({"hidden": 128, "intermediate": 704}, (256, 144)),
    "hidden 128, 8 layers": ({"hidden": 128, "intermediate": 704, "layers": 8}, (256, 144)),
    "hidden 160": ({"hidden": 160, "intermediate": 864}, (256, 144)),
    "vision 6 x 96": ({"vision_depth": 6, "vision_hidden": 96}, (256, 144)),
    "hidden 128, vision 6 x 96 @ 384x216": (
        {"hidden": 128, "intermediate": 704, "vision_depth": 6, "vision_hidden": 96},
        (384, 216),
    ),
}


def frames() -> list[DrivingInputs]:
    """Rendered 1920x1080 front views of five seeded scenes (the simulator's, as a camera would give)."""
    camera = Camera().scaled_to_width(1920)
    inputs = []
    for seed in range(5):
        scene = make_scene(seed)
        image = render_front(camera, scene.lanes, scene.snapshot()).image_rgb
        inputs.append(DrivingInputs(image, "straight", (10.0, 0.0), (0.0, 0.0)))
    return inputs


def random_model(shape: dict, bundled: LoadedModel, budget_px: int) -> LoadedModel:
    model = initial_model(**(BUNDLED_SHAPE | shape), kept_ids=read_kept(default_model_dir())).eval()
    for key in (MIN_INT_DIGITS_KEY, COMMAND_RULE_KEY, PLAN_FRAME_KEY):  # the bundled model's answers, prompt
        if hasattr(bundled.model.config, key):
            setattr(model.config, key, getattr(bundled.model.config, key))
    return LoadedModel(model=model, tokenizer=bundled.tokenizer, source="random", max_pixels=budget_px)


def measure(planners: dict[str, Planner], inputs: list[DrivingInputs], plans: int) -> dict[str, dict]:
    """Every variant's stages and forwards, the variants interleaved plan by plan (the machine's drift
    falls on all of them alike)."""
    for planner in planners.values():
        for frame in inputs[:3]:  # warm-up; a route model is given a straight road's route
            planner.plan(planner.on_a_straight_road(frame))
    stages = {name: [] for name in planners}
    forwards = {name: [] for name in planners}
    for index in range(plans):
        for name, planner in planners.items():
            output = planner.plan(planner.on_a_straight_road(inputs[index % len(inputs)]))
            stages[name].append(output.stages_s)
            forwards[name].append(output.decode.forwards)
    results = {}
    for name in planners:
        ms = {stage: 1e3 * float(np.median([s[stage] for s in stages[name]])) for stage in stages[name][0]}
        results[name] = {
            "before_decode_ms": ms["preprocess"] + ms["vision"] + ms["prefill"],
            "vision_ms": ms["vision"],
            "per_forward_ms": sum(1e3 * s["decode"] for s in stages[name]) / sum(forwards[name]),
            "forwards": forwards[name],
        }
    return results


def main() -> None:
    plans = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    config = decode_config(node_defaults())
    bundled = load_checkpoint(default_model_dir(), dtype="fp32")
    planners, params_m = {}, {}
    for name, (shape, (width, height)) in VARIANTS.items():
        loaded = bundled if shape is None else random_model(shape, bundled, width * height)
        planners[name] = Planner(loaded, config, max_pixels=width * height)
        params_m[name] = sum(p.numel() for p in loaded.model.parameters()) / 1e6
    results = measure(planners, frames(), plans)
    trained, reference = results["bundled model"], results["bundled shape, random"]
    forwards = np.percentile(trained["forwards"], [50, 90])
    print(f"bundled model: forwards a plan p50 {forwards[0]:.0f}, p90 {forwards[1]:.0f}; plan as measured:")
    print("variant | params M | before decoding ms | vision ms | forwards | per forward | p50 | p90")
    for name, result in results.items():
        ratio = result["per_forward_ms"] / reference["per_forward_ms"]
        before = trained["before_decode_ms"] + result["before_decode_ms"] - reference["before_decode_ms"]
        plan = before + forwards * trained["per_forward_ms"] * (1.0 if result is trained else ratio)
        print(
            f"{name} | {params_m[name]:.2f} | {result['before_decode_ms']:.1f} | {result['vision_ms']:.1f} | "
            f"{np.median(result['forwards']):.0f} | {result['per_forward_ms']:.2f} ({ratio:.2f}) | "
            f"{plan[0]:.0f} | {plan[1]:.0f}"
        )


if __name__ == "__main__":
    main()
