"""Open-loop evaluation on a generated dataset: planners (with the expert and constant velocity alongside),
detection answers (mAP) and QA answers (exact match).

Reads ``ground_truth.jsonl`` and ``qa.json`` of a ``wamdiff2 sim generate`` folder and a model's answers in
the same reference format. Running a model to make the answers is the decoders' job; this module scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval import metrics
from wamdiff2_ros.eval.baselines import constant_velocity_waypoints
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.sim.expert import GroundTruth
from wamdiff2_ros.sim.export import ground_truth_from_line


def load_truth(data_dir: Path) -> dict[str, GroundTruth]:
    """Sample id -> ground truth from ``data_dir/ground_truth.jsonl``.

    Raises:
        FileNotFoundError: no ground-truth file in ``data_dir``.
    """
    path = Path(data_dir) / "ground_truth.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {data_dir} a 'wamdiff2 sim generate' folder?")
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {line["id"]: ground_truth_from_line(line) for line in lines}


def load_predictions(path: Path) -> dict[str, np.ndarray]:
    """Sample id -> (8, 2) waypoints from a predictions file.

    Accepted: reference-format records whose last turn is the prediction (``planning.json`` with the answers
    replaced), or an object mapping id -> answer text ``x1,y1,...,x8,y8`` or -> [[x, y], ...].

    Raises:
        InputError: an unrecognised layout. ``ParseError``: an answer that is not 16 numbers.
    """
    data = json.loads(Path(path).read_text())
    if isinstance(data, list):
        data = {record["id"]: record["conversations"][-1]["value"] for record in data}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a list of records or an object id -> answer")
    return {
        key: parse_waypoints(value)
        if isinstance(value, str)
        else np.asarray(value, dtype=np.float64).reshape(8, 2)
        for key, value in data.items()
    }


def smoothed_predictions(
    truth: dict[str, GroundTruth], predictions: dict[str, np.ndarray], weight: float
) -> dict[str, np.ndarray]:
    """Each sample's plan as a planner with ``smoothing`` ``weight`` would have published it
    (``decoding.smoothing.smooth_waypoints`` from the sample's ego velocity)."""
    from wamdiff2_ros.decoding.smoothing import smooth_waypoints

    return {
        key: smooth_waypoints(plan, truth[key].velocity_ego_mps, weight)
        for key, plan in predictions.items()
        if key in truth
    }


def scoring_context(truth: GroundTruth) -> metrics.ScoringContext:
    """PDM scoring context of a sample: true agent futures, lanes, and the expert path for progress."""
    return metrics.ScoringContext(
        agents=metrics.Agents(truth.agents.poses_ego, truth.agents.sizes_m),
        reference_ego=truth.waypoints_ego,
        velocity_ego_mps=truth.velocity_ego_mps,
        drivable=metrics.DrivableArea(truth.drivable_ego),
        current_agents_ego=truth.agents.current_ego,
    )


def score_planner(truth: dict[str, GroundTruth], predictions: dict[str, np.ndarray]) -> dict:
    """Mean metrics of one planner over the samples it answered.

    Returns:
        ``samples``, ``missing`` (samples without a prediction), L2 per waypoint / ADE / FDE,
        ``collision_rate`` (share of samples whose plan overlaps an agent's true future), ``jump_rate``
        (share of plans with an impossible speed change, ``metrics.speed_jump``) and the mean of each PDM
        sub-score.

    Raises:
        InputError: no sample has a prediction.
    """
    ids = [key for key in truth if key in predictions]
    if not ids:
        raise InputError("no prediction matches a sample id of the dataset")
    pred = np.stack([predictions[key] for key in ids])
    expected = np.stack([truth[key].waypoints_ego for key in ids])
    report = {
        "samples": len(ids),
        "missing": len(truth) - len(ids),
        **metrics.displacement_errors(pred, expected),
    }
    contexts = [scoring_context(truth[key]) for key in ids]
    report["collision_rate"] = float(
        np.mean([metrics.collides(p, c.agents) for p, c in zip(pred, contexts, strict=True)])
    )
    report["jump_rate"] = float(np.mean([metrics.speed_jump(p) for p in pred]))
    subscores = [metrics.pdm_subscores(p, c) for p, c in zip(pred, contexts, strict=True)]
    for name in subscores[0]:
        report[name] = float(np.mean([s[name] for s in subscores]))
    return report


def baseline_predictions(truth: dict[str, GroundTruth]) -> dict[str, dict[str, np.ndarray]]:
    """Predictions of the expert (its own future) and of constant velocity for every sample."""
    return {
        "expert": {key: t.waypoints_ego for key, t in truth.items()},
        "constant-velocity": {
            key: constant_velocity_waypoints(t.velocity_ego_mps) for key, t in truth.items()
        },
    }


def evaluate_open_loop(data_dir: Path, planners: dict[str, dict[str, np.ndarray]] | None = None) -> dict:
    """Score the baselines and any given planners on a dataset folder.

    Args:
        data_dir: a ``wamdiff2 sim generate`` output folder.
        planners: name -> (sample id -> waypoints), e.g. a model's predictions.

    Returns:
        ``{"data": str, "samples": n, "planners": {name: score_planner report}}``.
    """
    truth = load_truth(data_dir)
    everyone = baseline_predictions(truth) | (planners or {})
    return {
        "data": str(data_dir),
        "samples": len(truth),
        "planners": {name: score_planner(truth, predictions) for name, predictions in everyone.items()},
    }


def _records(path: Path) -> list[dict]:
    records = json.loads(Path(path).read_text())
    if not isinstance(records, list):
        raise InputError(f"{path}: expected a list of reference-format records")
    return records


def read_answers(path: Path) -> dict[str, str]:
    """Sample id -> answer text from reference-format records (the last turn is the answer)."""
    return {record["id"]: record["conversations"][-1]["value"] for record in _records(path)}


def read_detection_answers(path: Path) -> dict[str, list[tuple[str, list[float] | None]]]:
    """Sample id -> its detection answers: the record's answer and the sampled ones decoded with it, each
    with its item scores where the record carries them (``eval.predict.ITEM_SCORES``, ``SAMPLED_ANSWERS``)."""
    from wamdiff2_ros.eval.predict import ITEM_SCORES, SAMPLED_ANSWERS

    return {
        r["id"]: [
            (r["conversations"][-1]["value"], r.get(ITEM_SCORES)),
            *((a["text"], a.get(ITEM_SCORES)) for a in r.get(SAMPLED_ANSWERS, [])),
        ]
        for r in _records(path)
    }


def score_detections(data_dir: Path, predictions_path: Path) -> dict:
    """Detection mAP of a model's answers (records like ``detection.json`` with the answers replaced).

    Answers are Qwen3-VL grounding JSON on the 0..1000 scale; only their well-formed items count as boxes,
    ranked by their item scores where the records carry them (``eval predict`` writes them), else unranked
    (every score 1.0, answer order), and fused with the sampled answers a record carries
    (``model.box_fusion``), as the planner node fuses them.

    Returns:
        ``detection_map``'s report over the well-formed items of each answer (``salvage_detections``: what
        the planner node publishes), plus ``unparsed`` (answers that do not parse whole),
        ``rejected_items`` (items or remainders dropped), ``missing``, and ``by_distance``: the same AP
        in each distance band (``detection_map_by_distance``).
    """
    from wamdiff2_ros.eval.detection import ImageDetections, detection_map, detection_map_by_distance
    from wamdiff2_ros.model.box_fusion import fused_answers
    from wamdiff2_ros.sim.dataset import load_camera

    truth = load_truth(data_dir)
    camera = load_camera(data_dir)
    k = camera.intrinsics
    predicted, unparsed, rejected = {}, 0, 0
    for key, answers in read_detection_answers(predictions_path).items():
        if key not in truth:
            continue
        # the boxes and scores the planner node would publish; the problems are the first answer's
        fused, problems = fused_answers(answers, (k.width_px, k.height_px))
        unparsed += bool(problems)
        rejected += len(problems)
        predicted[key] = ImageDetections(fused.boxes, fused.labels, fused.scores)
    expected = {key: ImageDetections(t.boxes_px, t.labels) for key, t in truth.items()}
    counts = {"unparsed": unparsed, "rejected_items": rejected, "missing": len(truth) - len(predicted)}
    by_distance = detection_map_by_distance(expected, predicted, camera)
    return detection_map(expected, predicted) | counts | {"by_distance": by_distance}


def score_qa(data_dir: Path, predictions_path: Path) -> dict:
    """Exact match of a model's answers (records like ``qa.json`` with the answers replaced); a missing
    answer counts as wrong."""
    from wamdiff2_ros.eval.qa import exact_match

    expected = read_answers(Path(data_dir) / "qa.json")
    answers = read_answers(predictions_path)
    keys = sorted(expected)
    return {
        "exact_match": exact_match([answers.get(k, "") for k in keys], [expected[k] for k in keys]),
        "questions": len(keys),
        "missing": sum(k not in answers for k in keys),
    }
