"""The WAM-Diff2 planning prompt and answer text, exactly as the reference writes them.

Reference: fudan-generative-vision/WAM-Diff2 README.md:103-125 (see shared/research/wamdiff2_reference.md §1.3).
This module builds text only; tokenisation and image handling live elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wamdiff2_ros.errors import InputError

COMMANDS = ("left", "straight", "right", "unknown")
IMAGE_PLACEHOLDER = "<image>"
PLANNING_INSTRUCTION = (
    "Instruction: Based on the visual motion cues from the image (such as the relative speed of other "
    "vehicles and the changing distance to the intersection) and the provided telemetry, predict the "
    "optimal driving action for the next 4 seconds with 8 new waypoints."
)
NUM_WAYPOINTS = 8  # 4 s at 0.5 s spacing (NAVSIM convention)
WAYPOINT_DT_S = 0.5


def _pair(values: Sequence[float], name: str) -> str:
    if len(values) != 2 or not all(np.isfinite(v) for v in values):
        raise InputError(f"{name} must be two finite numbers, got {values!r}")
    # Two decimals as the reference writes them; "+ 0.0" prints an exact -0.0 as 0.00.
    return f"({values[0] + 0.0:.2f},{values[1] + 0.0:.2f})"


def planning_user_text(
    command: str,
    velocity_mps: Sequence[float],
    acceleration_mps2: Sequence[float],
) -> str:
    """The human turn of the planning prompt, with ``<image>`` where the front image goes.

    Args:
        command: navigation command word (one of ``COMMANDS``).
        velocity_mps: ego velocity (vx, vy) in the ego frame, x forward, y left.
        acceleration_mps2: ego acceleration (ax, ay) in the ego frame.

    Raises:
        InputError: unknown command or non-finite numbers.
    """
    if command not in COMMANDS:
        raise InputError(f"navigation command must be one of {COMMANDS}, got {command!r}")
    return "\n".join(
        (
            f"Here is a front-view images from a driving vehicle: {IMAGE_PLACEHOLDER}",
            f"The navigation information is: {command}",
            "The current position is (0.00,0.00)",
            f"The current velocity is: {_pair(velocity_mps, 'velocity')} and current accelerate is: "
            f"{_pair(acceleration_mps2, 'acceleration')}",
            PLANNING_INSTRUCTION,
        )
    )


def format_waypoints(waypoints_ego: np.ndarray) -> str:
    """The answer text ``x1,y1,...,x8,y8`` with 2 decimals for an (8, 2) array in metres."""
    waypoints_ego = np.asarray(waypoints_ego, dtype=np.float64)
    if waypoints_ego.shape != (NUM_WAYPOINTS, 2) or not np.all(np.isfinite(waypoints_ego)):
        raise InputError(f"waypoints must be a finite ({NUM_WAYPOINTS}, 2) array, got shape {waypoints_ego.shape}")
    return ",".join(f"{v + 0.0:.2f}" for v in waypoints_ego.reshape(-1))
