"""Would the detection gain from test-time augmentation: a zoomed centre crop, or the mirrored frame?

Decodes every detection record of a `wamdiff2 sim generate` folder through `Planner.detect` (B32 S8, the
grammar, K answers fused: what the node runs) on the frame, on a centre crop (its boxes shifted back into
the frame; boxes cut by the crop's inner edges dropped) and on the mirrored frame (its boxes mirrored
back), and prints the COCO mAP by distance band of the frame's boxes alone and of each combination:
``crop fused`` (the crop's boxes fused with the frame's, a box outside the crop keeping the frame's
score), ``crop replaces`` (inside the crop, the crop's boxes), ``crop snaps`` (each frame box moved onto
the crop box it overlaps most, IoU >= 0.3), ``mirror fused`` (the two answers' boxes fused: 2K rows).
Choose on a selection set (`sim generate --seed 3`); docs/DECISIONS.md, "detection scores" entries.

Usage: python3 tools/probes/detection_tta.py MODEL_DIR DATA [K] (CPU, ~4 min for 300 frames at K = 4)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import Planner
from wamdiff2_ros.eval.detection import ImageDetections, detection_map, detection_map_by_distance
from wamdiff2_ros.eval.open_loop import load_truth
from wamdiff2_ros.eval.predict import MAX_NEW_TOKENS
from wamdiff2_ros.model.box_fusion import ScoredBoxes, fuse_boxes
from wamdiff2_ros.sim.dataset import load_camera
from wamdiff2_ros.training.data import load_records

CROP = (0.25, 0.22, 0.75, 0.72)  # x0, y0, x1, y1 as fractions of the frame: the road ahead, 2x zoom
EDGE_PX = 1.5


def _scored(output) -> ScoredBoxes:
    return ScoredBoxes(np.asarray(output.boxes_px, float).reshape(-1, 4), tuple(output.labels), output.scores)


def _subset(boxes: ScoredBoxes, keep: np.ndarray, weight: np.ndarray | None = None) -> ScoredBoxes:
    scores = np.asarray(boxes.scores, float)[keep] * (1.0 if weight is None else weight[keep])
    return ScoredBoxes(boxes.boxes[keep], tuple(np.array(boxes.labels, object)[keep]), tuple(scores))


def _inside(boxes: np.ndarray, region: np.ndarray) -> np.ndarray:
    return np.all(boxes[:, :2] >= region[:2], axis=1) & np.all(boxes[:, 2:] <= region[2:], axis=1)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    low, high = np.maximum(box[:2], boxes[:, :2]), np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(high - low, 0.0, None), axis=1)
    union = np.prod(box[2:] - box[:2]) + np.prod(boxes[:, 2:] - boxes[:, :2], axis=1) - inter
    return inter / np.maximum(union, 1e-9)


def combinations(frame: ScoredBoxes, crop: ScoredBoxes, mirror: ScoredBoxes, region: np.ndarray) -> dict:
    """Each variant's boxes for one frame (``crop`` in frame pixels, cut boxes already dropped)."""
    fused = fuse_boxes([frame, crop])
    outside = ~_inside(fused.boxes, region)  # only the frame could see these: undo fusion's halving
    fused = ScoredBoxes(fused.boxes, fused.labels, tuple(np.where(outside, 2.0, 1.0) * fused.scores))
    in_crop = _inside(frame.boxes, region)
    kept = _subset(frame, ~in_crop)
    replaced = ScoredBoxes(
        np.concatenate([kept.boxes, crop.boxes]), kept.labels + crop.labels, kept.scores + crop.scores
    )
    snapped = frame.boxes.copy()
    for index, box in enumerate(frame.boxes):
        if len(crop.boxes) and (overlap := _iou(box, crop.boxes)).max() >= 0.3:
            snapped[index] = crop.boxes[int(overlap.argmax())]
    return {
        "frame": frame,
        "crop fused": fused,
        "crop replaces": replaced,
        "crop snaps": ScoredBoxes(snapped, frame.labels, frame.scores),
        "mirror fused": fuse_boxes([frame, mirror]),
    }


def main() -> None:
    model_dir, data = Path(sys.argv[1]), Path(sys.argv[2])
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    config = DecodeConfig(
        block_size=32, steps=8, grammar=True, candidates=rows, temperature=0.7, greedy_first=True
    )
    planner = Planner.from_settings(config, checkpoint=str(model_dir))
    truth, camera = load_truth(data), load_camera(data)
    variants: dict[str, dict[str, ImageDetections]] = {}
    for record in load_records(data / "detection.json", "detection"):
        image = np.asarray(Image.open(record.image_path).convert("RGB"))
        height, width = image.shape[:2]
        region = np.array(CROP) * [width, height, width, height]
        x0, y0, x1, y1 = region.astype(int)
        region = np.array([x0, y0, x1, y1], float)
        budget = MAX_NEW_TOKENS["detection"]
        frame = _scored(planner.detect(image, record.user_text, budget))
        crop = _scored(planner.detect(np.ascontiguousarray(image[y0:y1, x0:x1]), record.user_text, budget))
        crop = ScoredBoxes(crop.boxes + np.array([x0, y0, x0, y0]), crop.labels, crop.scores)
        b = crop.boxes
        cut = (b[:, 0] <= x0 + EDGE_PX) | (b[:, 1] <= y0 + EDGE_PX) | (b[:, 2] >= x1 - EDGE_PX)
        cut |= b[:, 3] >= y1 - EDGE_PX
        crop = _subset(crop, ~cut)
        mirror = _scored(planner.detect(np.ascontiguousarray(image[:, ::-1]), record.user_text, budget))
        m = mirror.boxes
        mirror = ScoredBoxes(
            np.stack([width - m[:, 2], m[:, 1], width - m[:, 0], m[:, 3]], 1), mirror.labels, mirror.scores
        )
        for name, boxes in combinations(frame, crop, mirror, region).items():
            variants.setdefault(name, {})[record.id] = ImageDetections(
                boxes.boxes, boxes.labels, boxes.scores
            )
    expected = {key: ImageDetections(t.boxes_px, t.labels) for key, t in truth.items()}
    for name, predicted in variants.items():
        report = detection_map(expected, predicted)
        bands = detection_map_by_distance(expected, predicted, camera)
        by_band = " ".join(f"{band} {r['map']:.3f}" for band, r in bands.items())
        print(f"{name:14s} mAP {report['map']:.4f} AP50 {report['ap50']:.4f} | {by_band}")


if __name__ == "__main__":
    main()
