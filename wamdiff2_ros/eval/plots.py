"""Evaluation figures: planned trajectories drawn over the camera image, and L2 per waypoint per planner.

Matplotlib with the Agg backend (no display); figures are written as PNG and closed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wamdiff2_ros.geometry import NEAR_PLANE_M, Camera
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS, WAYPOINT_DT_S


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def trajectory_pixels(camera: Camera, waypoints_ego: np.ndarray) -> np.ndarray:
    """Ground-level waypoints (8, 2) as pixels (M, 2), ego origin first; points behind the lens dropped."""
    points = np.concatenate([np.zeros((1, 2)), np.asarray(waypoints_ego, dtype=np.float64)])
    points_ego = np.concatenate([points, np.zeros((len(points), 1))], axis=1)
    optical = camera.ego_to_optical(points_ego)
    return camera.project_optical(optical[optical[:, 2] > NEAR_PLANE_M])


def plot_trajectories_on_image(
    image_rgb: np.ndarray, camera: Camera, trajectories: dict[str, np.ndarray], path: Path, title: str = ""
) -> None:
    """Draw each named trajectory (8, 2, ego frame) on the ground plane of the image and save a PNG."""
    plt = _pyplot()
    k = camera.intrinsics
    fig, ax = plt.subplots(figsize=(k.width_px / 100, k.height_px / 100), dpi=100)
    ax.imshow(image_rgb)
    for name, waypoints in trajectories.items():
        pixels = trajectory_pixels(camera, waypoints)
        ax.plot(pixels[:, 0], pixels[:, 1], "o-", markersize=3, linewidth=1.5, label=name)
    ax.set_xlim(0, k.width_px)
    ax.set_ylim(k.height_px, 0)
    ax.axis("off")
    ax.legend(loc="upper right", fontsize=7)
    if title:
        ax.set_title(title, fontsize=8)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def plot_l2_per_waypoint(reports: dict[str, dict], path: Path) -> None:
    """L2 error against the horizon, one line per planner (reports from ``open_loop.score_planner``)."""
    plt = _pyplot()
    times_s = np.arange(1, NUM_WAYPOINTS + 1) * WAYPOINT_DT_S
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=100)
    for name, report in reports.items():
        ax.plot(times_s, report["l2_per_waypoint_m"], "o-", label=f"{name} (ADE {report['ade_m']:.2f} m)")
    ax.set_xlabel("horizon (s)")
    ax.set_ylabel("L2 error (m)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
