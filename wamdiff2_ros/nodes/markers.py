"""What rviz shows: trajectories as a MarkerArray in the ego frame (candidates thin and grey, the chosen one
thick green), and detection boxes drawn onto the camera frame."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker, MarkerArray

CHOSEN = ColorRGBA(r=0.1, g=0.9, b=0.2, a=1.0)
CANDIDATE = ColorRGBA(r=0.7, g=0.7, b=0.7, a=0.6)
FALLBACK = ColorRGBA(r=1.0, g=0.5, b=0.0, a=1.0)


def trajectory_markers(
    header: Header,
    trajectories_ego: Sequence[np.ndarray],
    chosen_index: int,
    namespace: str,
    fallback: bool = False,
    lifetime_s: float = 1.0,
) -> MarkerArray:
    """One LINE_STRIP per trajectory (origin first), after a DELETEALL that clears the previous frame's.

    Args:
        header: the trajectories' header (ego frame, source image stamp).
        trajectories_ego: (N, 2) waypoint arrays in metres.
        chosen_index: the one drawn thick (-1: none).
        namespace: marker namespace, so planner and scorer markers do not clear each other.
        fallback: draw the chosen one in orange (a fallback plan).
        lifetime_s: rviz removes markers this long after their stamp if no new frame came.
    """
    clear = Marker(header=header, ns=namespace, action=Marker.DELETEALL)
    markers = [clear]
    for index, waypoints in enumerate(trajectories_ego):
        chosen = index == chosen_index
        marker = Marker(header=header, ns=namespace, id=index, type=Marker.LINE_STRIP, action=Marker.ADD)
        marker.pose.orientation.w = 1.0
        marker.scale.x = 0.4 if chosen else 0.15
        marker.color = (FALLBACK if fallback else CHOSEN) if chosen else CANDIDATE
        marker.lifetime = Duration(sec=int(lifetime_s), nanosec=int((lifetime_s % 1) * 1e9))
        marker.points = [Point(x=0.0, y=0.0, z=0.1)] + [
            Point(x=float(x), y=float(y), z=0.1) for x, y in np.asarray(waypoints, dtype=np.float64)
        ]
        markers.append(marker)
    return MarkerArray(markers=markers)


def draw_boxes(
    image_bgr: np.ndarray,
    boxes_px: np.ndarray,
    labels: Sequence[str],
    scores: Sequence[float] = (),
) -> np.ndarray:
    """A copy of the frame with each box and its label (and score, when given) drawn (rviz's Image display
    shows it)."""
    import cv2

    canvas = np.ascontiguousarray(image_bgr).copy()
    boxes = np.asarray(boxes_px).reshape(-1, 4)
    captions = (
        [f"{label} {score:.2f}" for label, score in zip(labels, scores, strict=True)] if scores else labels
    )
    for (x1, y1, x2, y2), caption in zip(boxes, captions, strict=True):
        top_left, bottom_right = (round(x1), round(y1)), (round(x2), round(y2))
        cv2.rectangle(canvas, top_left, bottom_right, (0, 200, 255), 2)
        cv2.putText(
            canvas,
            caption,
            (top_left[0], max(top_left[1] - 4, 10)),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.5,
            (0, 200, 255),
            1,
        )
    return canvas
