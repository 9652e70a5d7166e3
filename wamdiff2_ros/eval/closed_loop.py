"""Closed-loop evaluation: each policy drives the same seeded episodes; route completion, infractions and
the driving score per episode and on average. The loop itself is ``sim.closed_loop``."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np

from wamdiff2_ros.eval.metrics import driving_score
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, EpisodeResult, PolicyFactory, run_episode

# Failure modes (issue 20's): a stall is a standing start or stop of this long that the episode never
# recovered from in time; collisions are told apart by the hit vehicle's heading relative to the ego's.
STALL_S = 5.0
FAILURE_MODES = (
    "completed",
    "collision_same_direction",
    "collision_crossing",
    "collision_oncoming",
    "route_deviation",
    "stall",
    "timeout",
)


def failure_mode(result: EpisodeResult) -> str:
    """What ended the episode, as one of ``FAILURE_MODES``.

    A collision with a vehicle within 30 degrees of the ego's heading is same-direction (rear-end, cut-in),
    beyond 150 oncoming, between them crossing; a timeout after standing still for ``STALL_S`` or more is a
    stall (the ego stopped and never got going again in time), any other a timeout (too slow)."""
    if result.end_reason == "collision":
        heading = result.collision_heading_deg
        if heading is None or heading < 30.0:
            return "collision_same_direction"
        return "collision_oncoming" if heading > 150.0 else "collision_crossing"
    if result.end_reason == "timeout":
        return "stall" if result.standstill_s >= STALL_S else "timeout"
    return result.end_reason


def episode_row(result: EpisodeResult) -> dict:
    """One episode as a JSON-ready row with its driving score and failure mode."""
    infractions = {"collision_vehicle": result.collisions, "off_road": result.off_road_events}
    row = {k: v for k, v in asdict(result).items() if k != "ego_path_map"}
    score = driving_score(result.route_completion, infractions)
    return row | {"driving_score": score, "failure_mode": failure_mode(result)}


def summarise(rows: list[dict]) -> dict:
    """Means over episodes: driving score, route completion, and collision / off-road / completion rates;
    the count of each failure mode, overall and per scene kind."""
    kinds = sorted({r["kind"] for r in rows})
    return {
        "episodes": len(rows),
        "driving_score": float(np.mean([r["driving_score"] for r in rows])),
        "route_completion": float(np.mean([r["route_completion"] for r in rows])),
        "collision_rate": float(np.mean([r["collisions"] > 0 for r in rows])),
        "off_road_rate": float(np.mean([r["off_road_events"] > 0 for r in rows])),
        "completed_rate": float(np.mean([r["end_reason"] == "completed" for r in rows])),
        "failure_modes": _counts(rows),
        "failure_modes_by_kind": {kind: _counts([r for r in rows if r["kind"] == kind]) for kind in kinds},
    }


def _counts(rows: list[dict]) -> dict[str, int]:
    return {mode: n for mode in FAILURE_MODES if (n := sum(r["failure_mode"] == mode for r in rows))}


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
    rows: dict[str, list[dict]] = {}
    with tqdm(total=len(policies) * len(seeds), desc="episodes", unit="episode", disable=not progress) as bar:
        for name, factory in policies.items():
            rows[name] = []
            for seed in seeds:
                rows[name].append(episode_row(run_episode(seed, factory, config, kind)))
                bar.update(1)
    return closed_loop_report_of(seeds, kind, rows)


def policy_report_of(
    seeds: list[int], kind: str | None, name: str, results: list[tuple[dict, dict[str, int]]], source: str
) -> dict:
    """The report of one model policy driven outside ``closed_loop_report`` (a probe's worker pool):
    ``results`` holds each seed's (episode row, the tallies the policy added), in ``seeds`` order; the
    tallies are summed into the policy's entry beside its checkpoint ``source``."""
    report = closed_loop_report_of(seeds, kind, {name: [row for row, _ in results]})
    tallies: dict[str, int] = {}
    for _, counts in results:
        for key, count in counts.items():
            tallies[key] = tallies.get(key, 0) + count
    report["policies"][name] |= {"source": source, "tallies": tallies}
    return report


def save_policy_report(path: str, report: dict, name: str) -> dict:
    """Write ``report`` (``policy_report_of``'s) as JSON to ``path``; returns the policy's entry without
    its per-episode lists, for a probe to print."""
    with open(path, "w") as handle:
        json.dump(report, handle, indent=1)
    return {k: v for k, v in report["policies"][name].items() if not isinstance(v, list)}


def closed_loop_report_of(seeds: list[int], kind: str | None, rows: dict[str, list[dict]]) -> dict:
    """The report of episode rows by policy (each policy's rows in ``seeds`` order). With the expert among
    the policies, each summary also counts ``failure_modes_expert_too``: the failures the expert has on the
    same seed (the scene's, e.g. a queue the expert cannot leave within the time limit either)."""
    policies = {
        name: {"summary": summarise(episodes), "episodes": episodes} for name, episodes in rows.items()
    }
    if "expert" in rows:
        expert = {r["seed"]: r["failure_mode"] for r in rows["expert"]}
        for name, episodes in rows.items():
            shared = [
                r
                for r in episodes
                if r["failure_mode"] != "completed" and expert[r["seed"]] == r["failure_mode"]
            ]
            policies[name]["summary"]["failure_modes_expert_too"] = _counts(shared)
    return {"seeds": list(seeds), "kind": kind, "policies": policies}
