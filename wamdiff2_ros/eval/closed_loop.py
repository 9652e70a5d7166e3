"""Closed-loop evaluation: each policy drives the same seeded episodes; route completion, infractions and
the driving score per episode and on average. The loop itself is ``sim.closed_loop``."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from wamdiff2_ros.eval.metrics import driving_score
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, EpisodeResult, PolicyFactory, run_episode


def episode_row(result: EpisodeResult) -> dict:
    """One episode as a JSON-ready row with its driving score."""
    infractions = {"collision_vehicle": result.collisions, "off_road": result.off_road_events}
    row = {k: v for k, v in asdict(result).items() if k != "ego_path_map"}
    return row | {"driving_score": driving_score(result.route_completion, infractions)}


def summarise(rows: list[dict]) -> dict:
    """Means over episodes: driving score, route completion, and collision / off-road / completion rates."""
    return {
        "episodes": len(rows),
        "driving_score": float(np.mean([r["driving_score"] for r in rows])),
        "route_completion": float(np.mean([r["route_completion"] for r in rows])),
        "collision_rate": float(np.mean([r["collisions"] > 0 for r in rows])),
        "off_road_rate": float(np.mean([r["off_road_events"] > 0 for r in rows])),
        "completed_rate": float(np.mean([r["end_reason"] == "completed" for r in rows])),
    }


def evaluate_closed_loop(
    policies: dict[str, PolicyFactory],
    seeds: list[int],
    config: ClosedLoopConfig | None = None,
    kind: str | None = None,
    progress: bool = True,
) -> dict:
    """Run every policy on every seed (``config`` defaults to ``ClosedLoopConfig()``).

    Returns:
        ``{"seeds": [...], "policies": {name: {"summary": ..., "episodes": [rows]}}}``.
    """
    from tqdm import tqdm

    config = config or ClosedLoopConfig()
    report = {"seeds": list(seeds), "kind": kind, "policies": {}}
    with tqdm(total=len(policies) * len(seeds), desc="episodes", unit="episode", disable=not progress) as bar:
        for name, factory in policies.items():
            rows = []
            for seed in seeds:
                rows.append(episode_row(run_episode(seed, factory, config, kind)))
                bar.update(1)
            report["policies"][name] = {"summary": summarise(rows), "episodes": rows}
    return report
