"""Weighted box fusion: K answers to one detection prompt (greedy and sampled rows) made one set of boxes.

One answer's boxes are placed to a few pixels and some cars are missed; K answers sampled from the same
prompt miss and misplace different ones. Fusing them (Solovyev et al., "Weighted boxes fusion", 2021) keeps
a car every answer found at its answers' mean place with its full score, and a car one answer found with a
K-th of it, so the ranking AP reads puts agreement first (docs/DECISIONS.md, "detection scores").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.model.parse import boxes_to_source_px, salvage_detections

# IoU from which a box joins a cluster: WBF's default, and the best of 0.4 / 0.55 / 0.7 on the selection set.
FUSION_IOU = 0.55


@dataclass(frozen=True)
class ScoredBoxes:
    """One answer's boxes (N, 4) x1, y1, x2, y2, their labels and scores."""

    boxes: np.ndarray
    labels: tuple[str, ...]
    scores: tuple[float, ...]


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of ``box`` (4,) with each of ``boxes`` (M, 4)."""
    low = np.maximum(box[:2], boxes[:, :2])
    high = np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(high - low, 0.0, None), axis=1)
    area = lambda b: np.prod(b[..., 2:] - b[..., :2], axis=-1)  # noqa: E731
    union = area(box) + area(boxes) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def fuse_boxes(answers: Sequence[ScoredBoxes], iou_threshold: float = FUSION_IOU) -> ScoredBoxes:
    """The boxes of K answers to one prompt, fused.

    Every box, highest score first, joins the cluster of its label whose fused box it overlaps most (IoU >=
    ``iou_threshold``) and that holds no box of its own answer yet, else starts a cluster. A cluster's box is
    its members' score-weighted mean, its score the sum of their scores over K. One answer is returned as
    it is.

    Returns:
        The fused boxes, highest-scored cluster first.
    """
    if len(answers) == 1:
        return answers[0]
    pool = [
        (float(score), row, box, label)
        for row, answer in enumerate(answers)
        for box, label, score in zip(
            np.asarray(answer.boxes, dtype=np.float64).reshape(-1, 4),
            answer.labels,
            answer.scores,
            strict=True,
        )
    ]
    pool.sort(key=lambda item: -item[0])
    clusters: list[dict] = []  # label, fused box, members (score, row, box)
    for score, row, box, label in pool:
        open_ = [c for c in clusters if c["label"] == label and all(m[1] != row for m in c["members"])]
        overlap = _iou(box, np.stack([c["box"] for c in open_])) if open_ else np.zeros(0)
        if len(overlap) and overlap.max() >= iou_threshold:
            cluster = open_[int(overlap.argmax())]
            cluster["members"].append((score, row, box))
            weights = np.array([m[0] for m in cluster["members"]]) + 1e-12
            cluster["box"] = weights @ np.stack([m[2] for m in cluster["members"]]) / weights.sum()
        else:
            clusters.append({"label": label, "box": box, "members": [(score, row, box)]})
    scores = [sum(m[0] for m in c["members"]) / len(answers) for c in clusters]
    order = np.argsort(-np.array(scores), kind="stable")
    return ScoredBoxes(
        np.array([clusters[i]["box"] for i in order], dtype=np.float64).reshape(-1, 4),
        tuple(clusters[i]["label"] for i in order),
        tuple(scores[i] for i in order),
    )


def fused_answers(
    answers: Sequence[tuple[str, Sequence[float] | None]], source_wh_px: tuple[int, int]
) -> tuple[ScoredBoxes, list[str]]:
    """The boxes of K grounding answers to one frame, in its pixels, fused.

    Args:
        answers: each answer's text and its item scores (``model.parse.grounding_item_scores``; None:
            unscored), the greedy answer first.
        source_wh_px: (width, height) of the frame.

    Returns:
        (fused boxes, what was wrong with the first answer's rejected items: ``salvage_detections``).
    """
    rows, problems = [], []
    for index, (text, item_scores) in enumerate(answers):
        detections, rejected = salvage_detections(text, item_scores)
        boxes = boxes_to_source_px(detections, source_wh_px)
        rows.append(
            ScoredBoxes(boxes, tuple(d.label for d in detections), tuple(d.score for d in detections))
        )
        if index == 0:
            problems = rejected
    return fuse_boxes(rows), problems
