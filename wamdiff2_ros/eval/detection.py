"""Detection mAP through pycocotools (COCO's AP averaged over IoU 0.50:0.95, plus AP50 and AP75).

Boxes are ``x1, y1, x2, y2`` in pixels of each sample's image. Parsing the model's text into boxes is
``model.parse``'s job; this module scores boxes it is given.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.scoring import box_ground_points
from wamdiff2_ros.geometry import Camera

# Distance bands (metres ahead along the ground) of ``detection_map_by_distance``: near, the cars the ego
# brakes for, those a planner should see coming, and the rest (the horizon's boxes included).
DISTANCE_BANDS_M = ((0.0, 15.0), (15.0, 30.0), (30.0, 60.0), (60.0, float("inf")))


@dataclass(frozen=True)
class ImageDetections:
    """Boxes (M, 4) with labels and confidence scores (1.0 for ground truth or unscored answers)."""

    boxes_px: np.ndarray
    labels: tuple[str, ...]
    scores: tuple[float, ...] | None = None


def _xywh(box: np.ndarray) -> list[float]:
    x1, y1, x2, y2 = (float(v) for v in box)
    return [x1, y1, x2 - x1, y2 - y1]


def detection_map(truth: dict[str, ImageDetections], predictions: dict[str, ImageDetections]) -> dict:
    """COCO box AP of ``predictions`` against ``truth`` over the images of ``truth``.

    Args:
        truth: image id -> ground-truth boxes.
        predictions: image id -> predicted boxes; a missing image counts as no detections.

    Returns:
        ``{"map": AP@[.50:.95], "ap50": ..., "ap75": ..., "images": n, "truth_boxes": n}``; the APs are NaN
        when there are no ground-truth boxes at all.

    Raises:
        InputError: a prediction for an image that has no ground truth entry.
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    extra = set(predictions) - set(truth)
    if extra:
        raise InputError(f"predictions for unknown images: {sorted(extra)[:5]}")
    categories = sorted({label for d in [*truth.values(), *predictions.values()] for label in d.labels})
    category_ids = {name: i + 1 for i, name in enumerate(categories)}
    image_ids = {name: i + 1 for i, name in enumerate(sorted(truth))}
    annotations = []
    for name, detections in truth.items():
        for box, label in zip(detections.boxes_px.reshape(-1, 4), detections.labels, strict=True):
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_ids[name],
                    "category_id": category_ids[label],
                    "bbox": _xywh(box),
                    "area": float((box[2] - box[0]) * (box[3] - box[1])),
                    "iscrowd": 0,
                }
            )
    summary = {"images": len(truth), "truth_boxes": len(annotations)}
    if not annotations:
        return {"map": float("nan"), "ap50": float("nan"), "ap75": float("nan"), **summary}
    dataset = {
        "images": [{"id": i} for i in image_ids.values()],
        "annotations": annotations,
        "categories": [{"id": i, "name": n} for n, i in category_ids.items()],
    }
    results = [
        {
            "image_id": image_ids[name],
            "category_id": category_ids[label],
            "bbox": _xywh(box),
            "score": float(score),
        }
        for name, d in predictions.items()
        for box, label, score in zip(
            d.boxes_px.reshape(-1, 4), d.labels, d.scores or (1.0,) * len(d.labels), strict=True
        )
    ]
    if not results:
        return {"map": 0.0, "ap50": 0.0, "ap75": 0.0, **summary}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress and tables
        coco_truth = COCO()
        coco_truth.dataset = dataset
        coco_truth.createIndex()
        evaluator = COCOeval(coco_truth, coco_truth.loadRes(results), iouType="bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = evaluator.stats
    return {"map": float(stats[0]), "ap50": float(stats[1]), "ap75": float(stats[2]), **summary}


def box_distances_m(boxes_px: np.ndarray, camera: Camera) -> np.ndarray:
    """Ground distance ahead (m) of each box's bottom centre through ``camera`` (flat ground, as the online
    scorer places boxes); a box whose bottom edge is at or above the horizon is infinitely far."""
    distances = np.linalg.norm(box_ground_points(boxes_px, camera), axis=1)
    return np.where(np.isfinite(distances), distances, np.inf)


def detection_map_by_distance(
    truth: dict[str, ImageDetections],
    predictions: dict[str, ImageDetections],
    camera: Camera,
    bands: tuple[tuple[float, float], ...] = DISTANCE_BANDS_M,
) -> dict[str, dict]:
    """``detection_map`` in each distance band: the truth boxes and the predicted boxes whose bottom centre
    lies in the band (``box_distances_m``). A box predicted just across a band's edge from its true car
    counts as a miss in one band and a false positive in the other, as COCO's area ranges do not; the bands
    are wide so that this is rare.

    Returns:
        ``{"0-15 m": detection_map report, ...}``.
    """

    def within(detections: ImageDetections, low: float, high: float) -> ImageDetections:
        boxes = detections.boxes_px.reshape(-1, 4)
        distances = box_distances_m(boxes, camera)
        keep = (distances >= low) & (distances < high)
        scores = None if detections.scores is None else tuple(np.asarray(detections.scores)[keep])
        return ImageDetections(boxes[keep], tuple(np.asarray(detections.labels, dtype=object)[keep]), scores)

    report = {}
    for low, high in bands:
        name = f"{low:g}-{high:g} m" if np.isfinite(high) else f"{low:g}+ m"
        report[name] = detection_map(
            {key: within(d, low, high) for key, d in truth.items()},
            {key: within(d, low, high) for key, d in predictions.items()},
        )
    return report
