"""Two planners compared on the same samples or episodes, with paired bootstrap intervals.

Open loop (the model card's "B = 32 against its AR teacher" table): both planners' predictions over the
same ``wamdiff2 sim generate`` folders, pooled; the ratio of mean ADEs and its 90 % interval over resamples
of the samples (the same resample for both planners, so their shared difficulty cancels). Closed loop: two
policies' driving scores over the same seeded episodes (``eval closed-loop`` reports, from one run or two);
the mean difference and its 90 % interval over resamples of the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.open_loop import load_predictions, load_truth


def sample_ade(data_dir: Path, predictions: Path, ids: list[str] | None = None) -> np.ndarray:
    """Per-sample ADE (m) of a predictions file, in the ground truth's sample order (of ``ids`` only when
    given: e.g. the samples two partial evaluations share).

    Raises:
        KeyError: a sample of the ground truth (or of ``ids``) has no prediction.
    """
    truth, planned = load_truth(data_dir), load_predictions(predictions)
    return np.array(
        [np.linalg.norm(planned[i] - truth[i].waypoints_ego, axis=1).mean() for i in sorted(ids or truth)]
    )


def paired_ratio(planner: np.ndarray, reference: np.ndarray, resamples: int = 5000, seed: int = 0) -> dict:
    """Mean ADE ratio planner / reference and its 90 % paired bootstrap interval.

    Args:
        planner: per-sample ADE of the planner.
        reference: per-sample ADE of the reference, the same samples in the same order.
        resamples: bootstrap resamples.
        seed: the resampling's seed.

    Returns:
        ``samples``, ``ade_m``, ``reference_ade_m``, ``ratio``, and ``low`` and ``high`` (the 5th and
        95th percentiles of the resampled ratio).

    Raises:
        ValueError: the two differ in length or are empty.
    """
    if len(planner) != len(reference) or len(planner) == 0:
        raise ValueError(f"paired samples needed, got {len(planner)} and {len(reference)}")
    draws = np.random.default_rng(seed).integers(0, len(reference), (resamples, len(reference)))
    ratios = planner[draws].mean(1) / reference[draws].mean(1)
    low, high = np.quantile(ratios, [0.05, 0.95])
    return {
        "samples": len(planner),
        "ade_m": float(planner.mean()),
        "reference_ade_m": float(reference.mean()),
        "ratio": float(planner.mean() / reference.mean()),
        "low": float(low),
        "high": float(high),
    }


def policy_episodes(report: Path, policy: str) -> dict[int, dict]:
    """Each episode of one policy in a closed-loop ``report.json`` (its seed, kind, driving score, failure
    mode, ...), by scene seed.

    Raises:
        InputError: the report has no such policy (the message lists those it has), or a seed twice.
    """
    policies = json.loads(Path(report).read_text())["policies"]
    if policy not in policies:
        raise InputError(f"{report} has no policy {policy!r}; it has {sorted(policies)}")
    episodes = policies[policy]["episodes"]
    by_seed = {int(e["seed"]): e for e in episodes}
    if len(by_seed) != len(episodes):
        raise InputError(f"{report}: policy {policy!r} drove a seed more than once")
    return by_seed


def driving_scores(episodes: dict[int, dict]) -> dict[int, float]:
    """The driving score of each of ``policy_episodes``' episodes, by scene seed."""
    return {seed: float(episode["driving_score"]) for seed, episode in episodes.items()}


def episode_scores(report: Path, policy: str) -> dict[int, float]:
    """Driving score of each episode of one policy in a closed-loop ``report.json``, by scene seed
    (``policy_episodes``' errors)."""
    return driving_scores(policy_episodes(report, policy))


def failure_changes(planner: dict[int, dict], reference: dict[int, dict]) -> dict:
    """Where two policies' episodes over the same seeds differ: the mean score by scene kind, each failure
    mode's count, and how often a reference episode's mode became another (``policy_episodes`` records;
    a record without a kind or mode counts as ``unknown``).

    Returns:
        ``by_kind``: kind -> {episodes, score, reference_score}; ``failure_modes``: mode -> {planner,
        reference} counts; ``changes``: ``"reference mode -> planner mode"`` -> episodes, largest first.
    """
    seeds = sorted(set(planner) & set(reference))
    by_kind: dict[str, dict] = {}
    modes: dict[str, dict[str, int]] = {}
    changes: dict[str, int] = {}
    for seed in seeds:
        mine, theirs = planner[seed], reference[seed]
        row = by_kind.setdefault(
            str(theirs.get("kind", "unknown")), {"episodes": 0, "score": 0.0, "reference_score": 0.0}
        )
        row["episodes"] += 1
        row["score"] += float(mine["driving_score"])
        row["reference_score"] += float(theirs["driving_score"])
        mode, was = str(mine.get("failure_mode", "unknown")), str(theirs.get("failure_mode", "unknown"))
        for name, side in ((mode, "planner"), (was, "reference")):
            modes.setdefault(name, {"planner": 0, "reference": 0})[side] += 1
        if mode != was:
            changes[f"{was} -> {mode}"] = changes.get(f"{was} -> {mode}", 0) + 1
    for row in by_kind.values():
        row["score"] /= row["episodes"]
        row["reference_score"] /= row["episodes"]
    ordered = dict(sorted(changes.items(), key=lambda item: (-item[1], item[0])))
    return {
        "by_kind": dict(sorted(by_kind.items())),
        "failure_modes": dict(sorted(modes.items())),
        "changes": ordered,
    }


def paired_difference(
    planner: dict[int, float], reference: dict[int, float], resamples: int = 5000, seed: int = 0
) -> dict:
    """Mean driving-score difference planner - reference over the same seeds, with its 90 % paired interval.

    Args:
        planner: per-seed driving score of the compared policy.
        reference: per-seed driving score of the reference, over the same seeds.
        resamples: bootstrap resamples of the seeds.
        seed: the resampling's seed.

    Returns:
        ``episodes``, ``score``, ``reference_score``, ``difference``, and ``low`` and ``high`` (the 5th
        and 95th percentiles of the resampled mean difference).

    Raises:
        InputError: the two cover different seeds, or none.
    """
    if set(planner) != set(reference) or not planner:
        raise InputError(f"the same episodes needed, got {len(planner)} and {len(reference)} seeds")
    seeds = sorted(planner)
    differences = np.array([planner[s] - reference[s] for s in seeds])
    draws = np.random.default_rng(seed).integers(0, len(seeds), (resamples, len(seeds)))
    low, high = np.quantile(differences[draws].mean(1), [0.05, 0.95])
    return {
        "episodes": len(seeds),
        "score": float(np.mean([planner[s] for s in seeds])),
        "reference_score": float(np.mean([reference[s] for s in seeds])),
        "difference": float(differences.mean()),
        "low": float(low),
        "high": float(high),
    }
