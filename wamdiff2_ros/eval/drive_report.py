"""Pictures and numbers of a replayed drive: trajectories and boxes drawn on the camera frames, a contact
sheet, an animated GIF, and open-loop errors of the selected plans against where the car really went.

Inputs are plain arrays (no ROS types): the demo and the evaluation tools gather them from bags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wamdiff2_ros.eval.metrics import displacement_errors
from wamdiff2_ros.eval.plots import trajectory_pixels
from wamdiff2_ros.geometry import Camera

SELECTED_RGB = (40, 220, 70)
CANDIDATE_RGB = (200, 200, 200)
EXPERT_RGB = (60, 120, 255)
BOX_RGB = (255, 190, 0)


@dataclass
class ReportFrame:
    """One planned frame: the image and what was planned on it, all trajectories (8, 2) in the ego frame."""

    stamp_s: float
    image_rgb: np.ndarray
    candidates_ego: list[np.ndarray]
    selected: int
    expert_ego: np.ndarray | None = None  # where the ego really was 0.5 .. 4 s later
    constant_velocity_ego: np.ndarray | None = None
    boxes_px: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    labels: Sequence[str] = ()
    status: str = ""
    detected: bool = False  # a detection answer belongs to this frame (its boxes, possibly none)


def draw_frame(frame: ReportFrame, camera: Camera) -> np.ndarray:
    """The frame's image with candidates (grey), the selected plan (green), the real path (blue) and boxes."""
    import cv2

    canvas = np.ascontiguousarray(frame.image_rgb).copy()

    def polyline(waypoints: np.ndarray, rgb: tuple[int, int, int], thickness: int) -> None:
        pixels = trajectory_pixels(camera, waypoints)
        if len(pixels) >= 2 and np.all(np.isfinite(pixels)):
            cv2.polylines(canvas, [np.round(pixels).astype(np.int32)], False, rgb, thickness, cv2.LINE_AA)

    for index, candidate in enumerate(frame.candidates_ego):
        if index != frame.selected:
            polyline(candidate, CANDIDATE_RGB, 1)
    if frame.expert_ego is not None:
        polyline(frame.expert_ego, EXPERT_RGB, 2)
    if 0 <= frame.selected < len(frame.candidates_ego):
        polyline(frame.candidates_ego[frame.selected], SELECTED_RGB, 3)
    for (x1, y1, x2, y2), label in zip(np.asarray(frame.boxes_px).reshape(-1, 4), frame.labels, strict=True):
        cv2.rectangle(canvas, (round(x1), round(y1)), (round(x2), round(y2)), BOX_RGB, 2)
        cv2.putText(
            canvas, label, (round(x1), max(round(y1) - 3, 9)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, BOX_RGB, 1
        )
    return canvas


def sheet_frames(frames: Sequence[ReportFrame], count: int = 12) -> list[ReportFrame]:
    """Up to ``count`` evenly spaced frames, taken from those with a detection answer where there are that
    many: the node answers detection every few plans, and a frame between answers has no boxes, which on a
    sheet reads as a car the detector missed."""
    detected = [frame for frame in frames if frame.detected]
    pool = detected if len(detected) >= min(count, len(frames)) else list(frames)
    picks = np.unique(np.linspace(0, len(pool) - 1, min(count, len(pool))).round().astype(int))
    return [pool[i] for i in picks]


def contact_sheet(frames: Sequence[ReportFrame], camera: Camera, path: Path, columns: int = 4) -> Path:
    """A grid of up to 12 evenly spaced frames (``sheet_frames``) with their drawings, titled with time,
    status and, where a detection answer belongs to the frame, its box count."""
    import matplotlib

    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    chosen = sheet_frames(frames)
    rows = max(1, -(-len(chosen) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.5 * rows), squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for axis, frame in zip(axes.flat, chosen, strict=False):
        axis.imshow(draw_frame(frame, camera))
        boxes = f"  {len(np.asarray(frame.boxes_px).reshape(-1, 4))} boxes" if frame.detected else ""
        axis.set_title(f"t = {frame.stamp_s:.1f} s{boxes}  {frame.status}", fontsize=8)
    figure.suptitle(
        "green: selected plan   grey: other candidates   blue: where the car went   yellow: boxes of the"
        " frame's detection answer"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def animation(frames: Sequence[ReportFrame], camera: Camera, path: Path, fps: float = 4.0) -> Path:
    """An animated GIF of every frame with its drawings."""
    from PIL import Image

    images = [Image.fromarray(draw_frame(frame, camera)) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return path


def open_loop_metrics(frames: Sequence[ReportFrame]) -> dict:
    """Mean L2 per waypoint, ADE and FDE of the selected plans and of constant velocity vs the real path,
    over the frames the model planned (a fallback's plan is counted, not scored)."""
    fallbacks = sum(f.status == "fallback" for f in frames)
    scored = [
        f
        for f in frames
        if f.expert_ego is not None and 0 <= f.selected < len(f.candidates_ego) and f.status != "fallback"
    ]
    summary: dict = {"frames_planned": len(frames), "frames_fallback": fallbacks}
    summary["frames_with_future"] = len(scored)
    policies = {
        "selected_plan": lambda f: f.candidates_ego[f.selected],
        "constant_velocity": lambda f: f.constant_velocity_ego,
    }
    for name, plan_of in policies.items():
        pairs = [(plan_of(f), f.expert_ego) for f in scored if plan_of(f) is not None]
        if pairs:
            errors = displacement_errors(np.stack([p for p, _ in pairs]), np.stack([t for _, t in pairs]))
            summary[name] = {
                "l2_per_waypoint_m": [round(v, 3) for v in errors["l2_per_waypoint_m"]],
                "ade_m": round(errors["ade_m"], 3),
                "fde_m": round(errors["fde_m"], 3),
            }
    return summary


def write_metrics(summary: dict, path: Path) -> Path:
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
