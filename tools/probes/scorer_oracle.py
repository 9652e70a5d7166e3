"""How far could better perception take the scorer? The node configuration's closed loop with the scorer fed
the simulator's true vehicles instead of the model's boxes.

`ScoredModelPolicy` (the planner's K = 4 candidates, the online scorer's pick and its stop), except that
its agents are the vehicles the camera could see (ahead of it, inside its horizontal field of view, within
``--range-m``), read from the live scene at each plan, with their true pose and size, and no detection is
decoded: ``static``, each held where it is over the horizon (what the scorer assumes of a box today, with
perfect boxes and depth); ``moving``, each moved on at its speed along its heading (a tracker's constant
velocity model, perfect). Against the model's own boxes, the gap is what detection and tracking could buy.
``route``: the model's own boxes as the node's scorer has them, but the candidates reordered so that those
that keep within ``ROUTE_TOLERANCE_M`` of the route's centreline come first (the greedy plan first among
them): what a scorer given the route (the CARLA bridge's waypoints) could buy by choice alone.

Usage: python3 tools/probes/scorer_oracle.py MODEL_DIR static|moving|route SEED EPISODES OUT.json
       [--image-width 256] [--workers 2] (CPU, ~8 min for 100 episodes on 2 cores)
"""

from __future__ import annotations

import argparse
import multiprocessing
from dataclasses import replace

import numpy as np

from wamdiff2_ros.eval.closed_loop import policy_report_of, save_policy_report
from wamdiff2_ros.eval.metrics import Agents
from wamdiff2_ros.eval.model_policy import ModelPolicySource, ScoredModelPolicy, counted_episode
from wamdiff2_ros.geometry import Camera, ego_to_map, map_to_ego, wrap_angle
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS, WAYPOINT_DT_S
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, Observation
from wamdiff2_ros.sim.scenes import Scene

HALF_FOV_RAD = np.radians(32.0 + 5.0)  # the camera's half angle, and a margin for a car half in view
ROUTE_TOLERANCE_M = 2.0


class OracleScoredPolicy(ScoredModelPolicy):
    """The scorer's agents from the live scene (``mode``: static or moving), no detection decoded."""

    def __init__(self, scored: ScoredModelPolicy, mode: str, range_m: float) -> None:
        super().__init__(
            scored.planner, scored.camera, scored.detect_every, scored.detect_max_tokens, scored.settings
        )
        self.mode, self.range_m, self.scene = mode, range_m, None

    def candidates(self, observation: Observation) -> list[np.ndarray]:
        parsed = super().candidates(observation)
        if self.mode != "route" or not parsed:
            return parsed
        ego = self.scene.snapshot().ego
        route = self.scene.route_map

        def off_route_m(candidate: np.ndarray) -> float:
            points = ego_to_map(candidate, ego.xy, ego.yaw_rad)
            nearest = np.linalg.norm(points[:, None] - route[None], axis=2).min(axis=1)
            return max(0.0, float(nearest.max()) - ROUTE_TOLERANCE_M)

        return sorted(parsed, key=off_route_m)  # stable: the greedy plan first among those on the route

    def scorer_agents(self, observation: Observation) -> Agents:
        if self.mode == "route":
            return super().scorer_agents(observation)
        snapshot = self.scene.snapshot()
        ego = snapshot.ego
        rows, sizes = [], []
        for agent in snapshot.agents:
            x, y = map_to_ego(agent.xy, ego.xy, ego.yaw_rad)
            ahead = x - self.camera.mount.x_m
            if ahead <= 0.5 or np.hypot(x, y) > self.range_m or abs(np.arctan2(y, ahead)) > HALF_FOV_RAD:
                continue
            yaw = float(wrap_angle(agent.yaw_rad - ego.yaw_rad))
            speed_mps = agent.speed_mps if self.mode == "moving" else 0.0
            moved = speed_mps * WAYPOINT_DT_S * np.arange(1, NUM_WAYPOINTS + 1)
            poses = np.stack([x + moved * np.cos(yaw), y + moved * np.sin(yaw), np.full_like(moved, yaw)], 1)
            rows.append(poses)
            sizes.append([agent.length_m, agent.width_m])
        if not rows:
            return Agents.none()
        return Agents(np.stack(rows), np.asarray(sizes, dtype=np.float64))

    def detect(self, observation: Observation) -> None:
        if self.mode == "route":  # the model's own boxes
            super().detect(observation)


_policies: dict[tuple, OracleScoredPolicy] = {}


def _job(job: tuple) -> tuple[dict, dict]:
    source, mode, range_m, seed, config = job
    key = (mode, range_m)
    if key not in _policies:
        _policies[key] = OracleScoredPolicy(replace(source, threads=1).policy(), mode, range_m)
    policy = _policies[key]

    def factory(scene: Scene) -> OracleScoredPolicy:
        policy.start_episode()
        policy.scene = scene
        return policy

    return counted_episode(policy, seed, config, factory=factory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("mode", choices=("static", "moving", "route"))
    parser.add_argument("seed", type=int)
    parser.add_argument("episodes", type=int)
    parser.add_argument("out")
    parser.add_argument("--image-width", type=int, default=256)
    parser.add_argument("--range-m", type=float, default=80.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    camera = Camera().scaled_to_width(args.image_width)
    config = ClosedLoopConfig(camera=camera)
    source = ModelPolicySource(args.model, scored=True, camera=camera, smoothing=1.0)
    seeds = list(range(args.seed, args.seed + args.episodes))
    jobs = [(source, args.mode, args.range_m, seed, config) for seed in seeds]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(_job, jobs)
    name = f"model-scored-oracle-{args.mode}"
    report = policy_report_of(seeds, None, name, results, args.model)
    print(name, save_policy_report(args.out, report, name))


if __name__ == "__main__":
    main()
