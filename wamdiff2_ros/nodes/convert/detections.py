"""The planner's detection answer (``Planner.detect``) -> a Detections2D message for the source image.

Boxes arrive in pixels of the source image (x1, y1, x2, y2, clipped to it: ``model.parse.boxes_to_source_px``)
and leave in the same grid, under the image's own header so that consumers match them to the frame exactly.
Each score is the model's confidence in its box (``model.parse.grounding_item_scores``), 1.0 where the
answer gave none (the message's convention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from std_msgs.msg import Header

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.msg import Detection2D, Detections2D

if TYPE_CHECKING:
    from wamdiff2_ros.decoding.planner import DetectionOutput


def detections_2d(output: DetectionOutput, header: Header, image_hw: tuple[int, int]) -> Detections2D:
    """A Detections2D message: one Detection2D per box, the image size, and the answer text as decoded.

    Args:
        output: the detection answer; its boxes in source pixels, one label each.
        header: the source image's header (stamp and optical frame), copied unchanged.
        image_hw: (height, width) of the source image in pixels (``image.shape[:2]``).

    Raises:
        InputError: boxes that are not (N, 4), a label or score count other than N, non-finite coordinates,
            or a box with x_min > x_max or y_min > y_max (the message promises ordered corners).
    """
    boxes = np.asarray(output.boxes_px, dtype=np.float64)
    boxes = boxes.reshape(0, 4) if boxes.size == 0 else boxes  # no boxes may come as shape (0,)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise InputError(f"detection boxes must be an (N, 4) array, got shape {boxes.shape}")
    if len(output.labels) != len(boxes):
        raise InputError(f"{len(boxes)} detection boxes but {len(output.labels)} labels")
    if not np.all(np.isfinite(boxes)):
        raise InputError("detection boxes contain NaN or infinite coordinates; nothing is published")
    if np.any(boxes[:, 0] > boxes[:, 2]) or np.any(boxes[:, 1] > boxes[:, 3]):
        raise InputError("a detection box has x_min > x_max or y_min > y_max")
    scores = output.scores or (1.0,) * len(boxes)
    if len(scores) != len(boxes):
        raise InputError(f"{len(boxes)} detection boxes but {len(scores)} scores")
    height, width = image_hw
    detections = [
        Detection2D(label=label, score=score, x_min=x1, y_min=y1, x_max=x2, y_max=y2)
        for (x1, y1, x2, y2), label, score in zip(boxes.tolist(), output.labels, scores, strict=True)
    ]
    return Detections2D(
        header=header,
        image_width=int(width),
        image_height=int(height),
        detections=detections,
        raw_text=output.text,
    )
