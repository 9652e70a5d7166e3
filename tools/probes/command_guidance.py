"""Does the model know more about the turn than its plans show? Command guidance at decode time.

Classifier-free guidance over the navigation command: every denoising step scores the block twice, once over
the frame's own prompt (told ``left`` or ``right``) and once over the same prompt told ``straight``, and
decodes from ``l_turn + w * (l_turn - l_straight)``. The LM head is linear without a bias, so combining the
final hidden states combines the logits exactly (``GuidedCache``). Frames told ``straight`` decode as
before. The model was never trained for this: the probe asks whether the difference the command makes is
pointing the right way, only too weakly (the approach plans' lateral end of 0.0 m whatever the command,
docs/log/seeing-model-fifth-run-2026-12-03.md).

Greedy plan, one row (``eval closed-loop --policy model``'s policy), the closed loop at 2 Hz.

Usage: python3 tools/probes/command_guidance.py MODEL_DIR WEIGHT SEED EPISODES OUT.json
       [--kind intersection|roundabout|highway] [--image-width 256] [--workers 2] [--smoothing 0]
       [--lateral-only]
"""

from __future__ import annotations

import argparse
import multiprocessing

import numpy as np
import torch

from wamdiff2_ros.decoding.block import decode_block
from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.eval.closed_loop import policy_report_of, save_policy_report
from wamdiff2_ros.eval.model_policy import ModelPolicy, ModelPolicySource, counted_episode
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.prompt import PromptTensors, build_planning_prompt
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, Observation

REFERENCE_COMMAND = "straight"


class GuidedCache:
    """Two ``BlockCache``s decoded in step: the prompt's and the reference prompt's; ``denoise`` returns the
    guided hidden states ``h + weight * (h - h_reference)``."""

    fp8_head = None  # the model's own LM head scores (``BlockCache.fp8_head``)

    def __init__(self, model, block_size: int, rows: int, reference: PromptTensors, weight: float) -> None:
        self.main = BlockCache(model, block_size, rows)
        self.reference_cache = BlockCache(model, block_size, rows)
        self.reference, self.weight = reference, weight

    @property
    def forwards(self) -> int:
        return self.main.forwards + self.reference_cache.forwards

    @forwards.setter
    def forwards(self, value: int) -> None:
        self.main.forwards = self.reference_cache.forwards = value

    def _guided(self, hidden: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        return hidden + self.weight * (hidden - reference)

    def prefill(self, prompt: PromptTensors) -> None:
        self.main.prefill(prompt)
        self.reference_cache.prefill(self.reference)

    def denoise(self, block: torch.Tensor) -> torch.Tensor:
        return self._guided(self.main.denoise(block), self.reference_cache.denoise(block))

    def write(self, block: torch.Tensor) -> None:
        self.main.write(block)
        self.reference_cache.write(block)

    def write_and_denoise(self, committed: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        hidden = self.main.write_and_denoise(committed, block)
        return self._guided(hidden, self.reference_cache.write_and_denoise(committed, block))


class GuidedPolicy(ModelPolicy):
    """The greedy plan, decoded with command guidance of ``weight`` where the command is a turn; with
    ``lateral_only``, each waypoint's forward distance from the plain plan and its lateral offset from the
    guided one (guidance also slows the plan: the turn prompts' plans are slower)."""

    def __init__(self, planner: Planner, weight: float, lateral_only: bool = False) -> None:
        super().__init__(planner)
        self.weight, self.lateral_only = weight, lateral_only
        self.guided_plans = 0

    def _prompt(self, inputs: DrivingInputs, command: str) -> PromptTensors:
        return build_planning_prompt(
            self.planner.loaded.tokenizer,
            inputs.image_rgb,
            command,
            inputs.velocity_mps,
            inputs.acceleration_mps2,
            inputs.command_distance_m,
            inputs.route_ahead_m,
            max_pixels=self.planner.max_pixels,
        )

    def candidates(self, observation: Observation) -> list[np.ndarray]:
        if observation.command == REFERENCE_COMMAND:
            return super().candidates(observation)
        inputs = DrivingInputs(
            image_rgb=observation.image_rgb,
            command=observation.command,
            velocity_mps=tuple(float(v) for v in observation.velocity_ego_mps),
            acceleration_mps2=tuple(float(a) for a in observation.accel_ego_mps2),
            command_distance_m=observation.command_distance_m,
            route_ahead_m=observation.route_ahead_m,
        )
        planner, config = self.planner, self.planner.config
        cache = GuidedCache(
            planner.loaded.model,
            config.block_size,
            config.candidates,
            self._prompt(inputs, REFERENCE_COMMAND),
            self.weight,
        )
        with torch.inference_mode():
            result = decode_block(
                planner.loaded.model,
                planner.loaded.tokenizer,
                self._prompt(inputs, inputs.command),
                config,
                planner._grammar,
                cache=cache,
            )
        self.plans += 1
        self.guided_plans += 1
        self.forwards += result.forwards
        parsed = [planner._parse(c.text, c.seed, inputs.velocity_mps) for c in result.candidates]
        guided = [c.waypoints_ego for c in parsed if c.waypoints_ego is not None]
        if not self.lateral_only or not guided:
            return guided
        plain = super().candidates(observation)
        self.plans -= 1  # one plan, decoded twice
        if not plain:
            return guided
        return [np.stack([plain[0][:, 0], guided[0][:, 1]], axis=1)]

    TALLIES = (*ModelPolicy.TALLIES, "guided_plans")


_policies: dict[float, GuidedPolicy] = {}


def _job(job: tuple) -> tuple[dict, dict]:
    source, weight, lateral_only, seed, config, kind = job
    if weight not in _policies:
        _policies[weight] = GuidedPolicy(source.policy().planner, weight, lateral_only)
    return counted_episode(_policies[weight], seed, config, kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("weight", type=float)
    parser.add_argument("seed", type=int)
    parser.add_argument("episodes", type=int)
    parser.add_argument("out")
    parser.add_argument("--kind", default=None)
    parser.add_argument("--image-width", type=int, default=256)
    parser.add_argument("--smoothing", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lateral-only", action="store_true", help="guided lateral, plain forward")
    args = parser.parse_args()
    camera = Camera().scaled_to_width(args.image_width)
    config = ClosedLoopConfig(camera=camera)
    source = ModelPolicySource(args.model, camera=camera, smoothing=args.smoothing, threads=1)
    seeds = list(range(args.seed, args.seed + args.episodes))
    jobs = [(source, args.weight, args.lateral_only, seed, config, args.kind) for seed in seeds]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(_job, jobs, chunksize=1)
    name = f"model-guided-{args.weight:g}" + ("-lateral" if args.lateral_only else "")
    report = policy_report_of(seeds, args.kind, name, results, args.model)
    print(name, save_policy_report(args.out, report, name))


if __name__ == "__main__":
    main()
