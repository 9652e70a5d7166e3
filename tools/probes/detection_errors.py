"""Why a model's detection AP is low (issue 20): missed cars, or cars found but boxed loosely?

For each true box of a held-out set, by distance band: its size in pixels of the model's input when a
1920x1080 frame is resized to each of several pixel budgets (is the car too small to see there?) and the
best IoU any predicted box reaches on it (none: missed; under 0.5: found, boxed too loosely for AP50).
For the matched pairs (best IoU > 0): the median error of each edge on Qwen3-VL's 0..1000 scale, and the
predicted width and height over the true ones.

Usage: python3 tools/probes/detection_errors.py DATA ANSWERS
    DATA: a `wamdiff2 sim generate` folder; ANSWERS: `wamdiff2 eval predict CHECKPOINT DATA ANSWERS --task
    detection` of it (e.g. models/default on `sim generate --samples 300 --seed 0 --width 256`, ~20 s).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from wamdiff2_ros.eval.detection import DISTANCE_BANDS_M, box_distances_m
from wamdiff2_ros.eval.open_loop import load_truth, read_answers
from wamdiff2_ros.model.image import smart_resize
from wamdiff2_ros.model.parse import boxes_to_source_px, salvage_detections
from wamdiff2_ros.sim.dataset import load_camera

BUDGETS = {"256x144": 36_864, "384x216": 82_944, "512x288": 147_456}
CAMERA_HW_PX = (1080, 1920)  # a camera frame, resized to each budget as the model's input


def iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def main() -> None:
    data, answers_path = Path(sys.argv[1]), Path(sys.argv[2])
    truth, camera = load_truth(data), load_camera(data)
    size = np.array([camera.intrinsics.width_px, camera.intrinsics.height_px] * 2, dtype=np.float64)
    answers = read_answers(answers_path)
    rows, errors = [], []  # (band, width / W, height / H, best IoU); matched pairs' edge errors
    for key, sample in truth.items():
        predicted = boxes_to_source_px(salvage_detections(answers.get(key, "[]"))[0], tuple(size[:2]))
        boxes = np.asarray(sample.boxes_px, dtype=np.float64).reshape(-1, 4)
        for box, distance in zip(boxes, box_distances_m(boxes, camera), strict=True):
            band = next(b for b in DISTANCE_BANDS_M if b[0] <= distance < b[1])
            ious = [iou(box, p) for p in predicted]
            best = int(np.argmax(ious)) if ious else -1
            rows.append((band, *((box[2:] - box[:2]) / size[:2]), ious[best] if ious else 0.0))
            if ious and ious[best] > 0:
                match = predicted[best]
                shape = (match[2:] - match[:2]) / (box[2:] - box[:2])
                errors.append([*((match - box) / size * 1000), *shape])
    print("band | boxes | median size px at " + " / ".join(BUDGETS) + " | missed | IoU < 0.5 | IoU >= 0.5")
    for band in DISTANCE_BANDS_M:
        picked = [r for r in rows if r[0] == band]
        if not picked:
            continue
        width, height, best = (np.array([r[i] for r in picked]) for i in (1, 2, 3))
        sizes = []
        for budget in BUDGETS.values():
            h, w = smart_resize(*CAMERA_HW_PX, max_pixels=budget)
            sizes.append(f"{np.median(width) * w:.0f}x{np.median(height) * h:.0f}")
        shares = [np.mean(best == 0), np.mean((best > 0) & (best < 0.5)), np.mean(best >= 0.5)]
        shares_text = " | ".join(f"{share:.2f}" for share in shares)
        print(f"{band[0]:.0f}-{band[1]:.0f} m | {len(picked)} | {' / '.join(sizes)} | {shares_text}")
    errors = np.array(errors)
    edges = ", ".join(
        f"{name} {np.median(errors[:, i]):+.1f} (abs {np.median(np.abs(errors[:, i])):.1f})"
        for i, name in enumerate(("x1", "y1", "x2", "y2"))
    )
    print(f"matched {len(errors)}: edge error on 0..1000, median (median abs): {edges}")
    print(f"predicted / true width {np.median(errors[:, 4]):.2f}, height {np.median(errors[:, 5]):.2f}")


if __name__ == "__main__":
    main()
