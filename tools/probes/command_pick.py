"""Would picking, among the planner's K candidates, one that turns the way the command says rescue the
junctions?

Round 6 brakes for a junction and stops there: its greedy plan's lateral stays 0 m, while a few of its
sampled plans turn at some frames (docs/log/seeing-model-fifth-run-2026-12-03.md, "Round 6"), and once the
car has started to turn the model's plans follow the turn. This drives the same intersection episodes
twice: the greedy plan (the `model` policy), and K candidates (candidate 0 greedy, the rest sampled at
``TEMPERATURE``) of which the first that ends at least ``MIN_LATERAL_M`` to the command's side is driven
while a `left` / `right` branch is within ``NEAR_M`` (else candidate 0). A probe, not a product rule: the
scorer node does not read the command.

Usage: python3 tools/probes/command_pick.py MODEL_DIR OUT.json [FIRST_SEED] [EPISODES] [WORKERS]
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from dataclasses import dataclass

import numpy as np
import torch

from wamdiff2_ros.eval.closed_loop import closed_loop_report_of, episode_row
from wamdiff2_ros.eval.model_policy import ModelPolicy, ModelPolicySource, model_policy_factory
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, Observation, run_episode

CANDIDATES, TEMPERATURE = 4, 1.0
MIN_LATERAL_M, NEAR_M = 1.0, 40.0
KIND = "intersection"


class CommandPick(ModelPolicy):
    """K candidates; the first that turns to the command's side while its branch is near."""

    TALLIES = (*ModelPolicy.TALLIES, "picked_turn")

    def __init__(self, planner) -> None:
        super().__init__(planner)
        self.picked_turn = 0

    def __call__(self, observation: Observation) -> np.ndarray:
        parsed = self.candidates(observation)
        if not parsed:
            return super().__call__(observation)
        side = {"left": 1.0, "right": -1.0}.get(observation.command)
        distance = observation.command_distance_m
        if side is not None and distance is not None and distance <= NEAR_M:
            for index, plan in enumerate(parsed):
                if side * plan[-1, 1] >= MIN_LATERAL_M:
                    self.picked_turn += index > 0
                    return plan
        return parsed[0]


@dataclass(frozen=True)
class Source:
    folder: str
    pick: bool

    def policy(self) -> ModelPolicy:
        torch.set_num_threads(1)
        source = ModelPolicySource(self.folder, camera=Camera().scaled_to_width(256))
        if not self.pick:
            return source.policy()
        config = source._decode_config(candidates=CANDIDATES, temperature=TEMPERATURE, greedy_first=True)
        return CommandPick(source._planner(config))


_policies: dict[bool, ModelPolicy] = {}


def _job(job: tuple[Source, int, ClosedLoopConfig]) -> dict:
    source, seed, config = job
    if source.pick not in _policies:
        _policies[source.pick] = source.policy()
    policy = _policies[source.pick]
    before = getattr(policy, "picked_turn", 0)
    row = episode_row(run_episode(seed, model_policy_factory(policy), config, KIND))
    return row | {"picked_turn": getattr(policy, "picked_turn", 0) - before}


def main() -> None:
    folder, out = sys.argv[1], sys.argv[2]
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    episodes = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    workers = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    seeds = list(range(first, first + episodes))
    config = ClosedLoopConfig(route_length_m=120.0, max_duration_s=40.0, camera=Camera().scaled_to_width(256))
    rows: dict[str, list[dict]] = {}
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for name, pick in (("model", False), ("command-pick", True)):
            rows[name] = pool.map(_job, [(Source(folder, pick), seed, config) for seed in seeds])
    report = closed_loop_report_of(seeds, KIND, rows)
    with open(out, "w") as file:
        json.dump(report, file, indent=1)
    for name, policy in report["policies"].items():
        summary = policy["summary"]
        picked = sum(row.get("picked_turn", 0) for row in rows[name])
        print(
            name, round(summary["driving_score"], 3), summary["failure_modes"], "sampled turns driven", picked
        )


if __name__ == "__main__":
    main()
