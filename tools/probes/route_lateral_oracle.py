"""How far would reading the route take the planner? Its plans, each laid along the route's shape.

Rounds 6g and 7g were told the route's shape ahead and still did not turn with it: they stand at the
junction (6g) or leave the route there (7g). This asks what a model that read the route perfectly, and kept
everything else it does, would drive: each candidate's waypoints keep their distances along the plan (the
model's speed profile: its braking, its stops, its yielding) and are placed along the route with d = 0 in
one of ``route_frame.LATERALS``: ``moved`` (the default: the route's shape moved to the car, as the
``branch_route`` prompt gives it), ``centreline`` (back into the route's lane) or ``offset`` (at the car's
present offset, normal to the route). The gap to the
plain configuration is the most a route-reading fix could buy; what stays below the expert is the rest
(collisions, speed, stalls of its own).

``scored``: the nodes' configuration (K = 4 candidates, each laid along the route, the scorer's pick and
stop); ``greedy``: the greedy plan alone.

Usage: python3 tools/probes/route_lateral_oracle.py MODEL_DIR scored|greedy SEED EPISODES OUT.json
       [--image-width 256] [--workers 2] [--lateral moved|centreline|offset]
       (CPU, ~12 min for 100 episodes scored on 2 cores)
"""

from __future__ import annotations

import argparse
import multiprocessing
from dataclasses import replace

import numpy as np

from wamdiff2_ros.eval.closed_loop import policy_report_of, save_policy_report
from wamdiff2_ros.eval.model_policy import ModelPolicy, ModelPolicySource, ScoredModelPolicy, counted_episode
from wamdiff2_ros.geometry import Camera, map_to_ego
from wamdiff2_ros.route_frame import LATERALS, RouteFrame
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, Observation
from wamdiff2_ros.sim.scenes import Scene


def along_route(
    plan_ego: np.ndarray,
    route_map: np.ndarray,
    ego_xy: np.ndarray,
    ego_yaw_rad: float,
    lateral: str = "moved",
) -> np.ndarray:
    """``plan_ego`` (n, 2) with each waypoint moved as far along the route (``RouteFrame``) as the
    waypoint is along the plan: s from the plan, d = 0 in the ``lateral`` frame (``moved`` and ``offset``:
    a standing plan stays; ``centreline``: the plan steps back into the lane, a standing plan points beside
    the car)."""
    arcs = np.cumsum(np.linalg.norm(np.diff(np.vstack([np.zeros(2), plan_ego]), axis=0), axis=1))
    points = RouteFrame.from_points(route_map).to_xy(arcs, np.zeros_like(arcs), ego_xy, lateral)
    return map_to_ego(points, ego_xy, ego_yaw_rad)


class RouteLateral:
    """A policy's candidates laid along the live scene's route (``scene`` set at each episode's start)."""

    scene: Scene | None = None
    lateral = "moved"

    def candidates(self, observation: Observation) -> list[np.ndarray]:
        ego, route = self.scene.snapshot().ego, self.scene.route_map
        return [
            along_route(c, route, ego.xy, ego.yaw_rad, self.lateral) for c in super().candidates(observation)
        ]


class ScoredRouteLateral(RouteLateral, ScoredModelPolicy):
    pass


class GreedyRouteLateral(RouteLateral, ModelPolicy):
    pass


_policies: dict[str, ModelPolicy] = {}


def _job(job: tuple) -> tuple[dict, dict]:
    source, seed, config, lateral = job
    if "policy" not in _policies:
        built = replace(source, threads=1).policy()
        if source.scored:
            _policies["policy"] = ScoredRouteLateral(
                built.planner, built.camera, built.detect_every, built.detect_max_tokens, built.settings
            )
        else:
            _policies["policy"] = GreedyRouteLateral(built.planner)
    policy = _policies["policy"]
    policy.lateral = lateral

    def factory(scene: Scene) -> ModelPolicy:
        policy.start_episode()
        policy.scene = scene
        return policy

    return counted_episode(policy, seed, config, factory=factory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("policy", choices=("scored", "greedy"))
    parser.add_argument("seed", type=int)
    parser.add_argument("episodes", type=int)
    parser.add_argument("out")
    parser.add_argument("--image-width", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lateral", choices=LATERALS, default="moved", help="where d = 0 lies")
    args = parser.parse_args()
    camera = Camera().scaled_to_width(args.image_width)
    config = ClosedLoopConfig(camera=camera)
    source = ModelPolicySource(args.model, scored=args.policy == "scored", camera=camera, smoothing=1.0)
    seeds = list(range(args.seed, args.seed + args.episodes))
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(_job, [(source, seed, config, args.lateral) for seed in seeds])
    name = f"model-{args.policy}-route-lateral" + ("" if args.lateral == "moved" else f"-{args.lateral}")
    report = policy_report_of(seeds, None, name, results, args.model)
    print(name, save_policy_report(args.out, report, name))


if __name__ == "__main__":
    main()
