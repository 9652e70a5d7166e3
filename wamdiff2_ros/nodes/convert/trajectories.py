"""Ego-frame waypoints -> PlannedTrajectory and nav_msgs/Path messages; finite and well-formed, or an error.

Nothing here decides what to plan: callers hand in an (N, 2) array of waypoints (x forward, y left,
metres, ``dt_s`` apart, the first one ``dt_s`` after the source image) and the status that goes with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Point, PoseStamped, Quaternion
from nav_msgs.msg import Path
from std_msgs.msg import Header

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.msg import DecoderInfo, PlannedTrajectory, TrajectoryPoint


def _checked(waypoints_ego: np.ndarray) -> np.ndarray:
    waypoints = np.asarray(waypoints_ego, dtype=np.float64)
    if waypoints.ndim != 2 or waypoints.shape[1] != 2 or len(waypoints) == 0:
        raise InputError(f"waypoints must be a non-empty (N, 2) array, got shape {waypoints.shape}")
    if not np.all(np.isfinite(waypoints)):
        raise InputError("waypoints contain NaN or infinite values; nothing is published")
    return waypoints


def _duration(seconds: float) -> Duration:
    nanoseconds = round(seconds * 1e9)
    return Duration(sec=nanoseconds // 1_000_000_000, nanosec=nanoseconds % 1_000_000_000)


def headings_and_speeds(waypoints_ego: np.ndarray, dt_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Heading (rad) and mean speed (m/s) of each segment arriving at a waypoint, the first from the origin.

    A zero-length segment keeps the previous heading (0 for the first): a stopped plan keeps pointing ahead.
    """
    waypoints = _checked(waypoints_ego)
    segments = np.diff(np.vstack([np.zeros((1, 2)), waypoints]), axis=0)
    lengths = np.hypot(segments[:, 0], segments[:, 1])
    headings = np.zeros(len(waypoints))
    previous = 0.0
    for i, ((dx, dy), length) in enumerate(zip(segments, lengths, strict=True)):
        previous = math.atan2(dy, dx) if length > 1e-6 else previous
        headings[i] = previous
    return headings, lengths / dt_s


def trajectory_points(waypoints_ego: np.ndarray, dt_s: float = 0.5) -> list[TrajectoryPoint]:
    """TrajectoryPoint messages for the waypoints (see the module docstring for units).

    Raises:
        InputError: wrong shape, empty, or non-finite waypoints.
    """
    waypoints = _checked(waypoints_ego)
    headings, speeds = headings_and_speeds(waypoints, dt_s)
    return [
        TrajectoryPoint(
            time_from_start=_duration((i + 1) * dt_s),
            position=Point(x=float(x), y=float(y), z=0.0),
            heading=float(heading),
            speed=float(speed),
        )
        for i, ((x, y), heading, speed) in enumerate(zip(waypoints, headings, speeds, strict=True))
    ]


def planned_trajectory(
    header: Header,
    waypoints_ego: np.ndarray,
    *,
    status: int = PlannedTrajectory.STATUS_OK,
    status_reason: str = "",
    raw_text: str = "",
    command: int = 0,
    decoder: DecoderInfo | None = None,
    model_name: str = "",
    dt_s: float = 0.5,
) -> PlannedTrajectory:
    """A complete PlannedTrajectory message.

    Raises:
        InputError: bad waypoints (see ``trajectory_points``) or an unknown status.
    """
    if status not in (
        PlannedTrajectory.STATUS_OK,
        PlannedTrajectory.STATUS_DEGRADED,
        PlannedTrajectory.STATUS_FALLBACK,
    ):
        raise InputError(f"unknown trajectory status {status}")
    return PlannedTrajectory(
        header=header,
        points=trajectory_points(waypoints_ego, dt_s),
        status=status,
        status_reason=status_reason,
        raw_text=raw_text,
        command=command,
        decoder=decoder if decoder is not None else DecoderInfo(),
        model_name=model_name,
    )


def waypoints_of(trajectory: PlannedTrajectory) -> np.ndarray:
    """The (N, 2) ego-frame waypoints of a PlannedTrajectory message."""
    return np.array([[p.position.x, p.position.y] for p in trajectory.points], dtype=np.float64).reshape(
        -1, 2
    )


def _yaw_quaternion(yaw: float) -> Quaternion:
    return Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2.0), w=math.cos(yaw / 2.0))


def path(header: Header, waypoints_ego: np.ndarray, dt_s: float = 0.5) -> Path:
    """nav_msgs/Path for rviz: the ego origin followed by the waypoints, oriented along the segments.

    Each pose's stamp is the source stamp plus its time offset, so rviz and bag tools see the timing.
    """
    waypoints = _checked(waypoints_ego)
    headings, _ = headings_and_speeds(waypoints, dt_s)
    base_ns = int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)
    poses = []
    for i, ((x, y), yaw) in enumerate(zip(np.vstack([[0.0, 0.0], waypoints]), [0.0, *headings], strict=True)):
        pose = PoseStamped()
        stamp_ns = base_ns + round(i * dt_s * 1e9)
        pose.header.stamp.sec, pose.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        pose.header.frame_id = header.frame_id
        pose.pose.position = Point(x=float(x), y=float(y), z=0.0)
        pose.pose.orientation = _yaw_quaternion(float(yaw))
        poses.append(pose)
    return Path(header=header, poses=poses)


def decoder_info(
    *,
    block_size: int,
    max_steps: int,
    steps_used: Sequence[int],
    forwards: int,
    commit_rule: str,
    threshold: float,
    temperature: float,
    seed: int,
    grammar_constrained: bool,
    prefill_ms: float,
    latency_ms: float,
) -> DecoderInfo:
    """DecoderInfo with every field named (uint16 fields are clamped to their range)."""
    return DecoderInfo(
        block_size=min(int(block_size), 65535),
        max_steps=min(int(max_steps), 65535),
        steps_used=[min(int(s), 65535) for s in steps_used],
        forwards=int(forwards),
        commit_rule=commit_rule,
        threshold=float(threshold),
        temperature=float(temperature),
        seed=int(seed) % 2**32,
        grammar_constrained=bool(grammar_constrained),
        prefill_ms=float(prefill_ms),
        latency_ms=float(latency_ms),
    )
