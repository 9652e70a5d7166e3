"""Filled-in instances of every custom message (every field non-default), shared by the ROS tests."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point
from std_msgs.msg import Header

from wamdiff2_ros.msg import (
    CandidateTrajectories,
    DecoderInfo,
    Detection2D,
    Detections2D,
    DrivingCommand,
    PlannedTrajectory,
    TrajectoryPoint,
    TrajectoryScore,
)


def f32(value: float) -> float:
    """A float32 field holds what this returns; comparing after a round trip needs exactly that."""
    return float(np.float32(value))


HEADER = Header(stamp=Time(sec=1_700_000_000, nanosec=123_456_789), frame_id="ego_vehicle")


def planned_trajectory(offset_m: float) -> PlannedTrajectory:
    points = [
        TrajectoryPoint(
            time_from_start=Duration(sec=i // 2, nanosec=500_000_000 * (i % 2)),
            position=Point(x=offset_m + 2.0 * i, y=-0.1 * i, z=0.0),
            heading=f32(-0.05 * i),
            speed=f32(4.0 + 0.1 * i),
        )
        for i in range(1, 9)
    ]
    decoder = DecoderInfo(
        block_size=32,
        max_steps=8,
        steps_used=[8, 5, 2],
        forwards=18,
        commit_rule="low_confidence_static",
        threshold=f32(0.9),
        temperature=f32(0.7),
        seed=42,
        grammar_constrained=True,
        prefill_ms=f32(31.4),
        latency_ms=f32(88.3),
    )
    return PlannedTrajectory(
        header=HEADER,
        points=points,
        status=PlannedTrajectory.STATUS_DEGRADED,
        status_reason="waypoint 8 clamped to 20 m per step",
        raw_text="2.26,-0.17,4.43,-0.40,6.52,-0.78,8.51,-1.32,10.39,-2.04,12.15,-2.96,13.81,-4.09,15.59,-8.59",
        command=DrivingCommand.RIGHT,
        decoder=decoder,
        model_name="wamdiff2-b32-tiny",
    )


SAMPLES = {
    "DrivingCommand": DrivingCommand(header=HEADER, command=DrivingCommand.LEFT),
    "TrajectoryPoint": planned_trajectory(0.0).points[3],
    "DecoderInfo": planned_trajectory(0.0).decoder,
    "PlannedTrajectory": planned_trajectory(0.0),
    "TrajectoryScore": TrajectoryScore(
        total=f32(0.81),
        no_collision=1.0,
        drivable_area=1.0,
        time_to_collision=f32(0.9),
        ego_progress=f32(0.7),
    ),
    "CandidateTrajectories": CandidateTrajectories(
        header=HEADER,
        candidates=[planned_trajectory(0.0), planned_trajectory(0.5), planned_trajectory(1.0)],
        scores=[
            TrajectoryScore(total=f32(0.1 * k), no_collision=1.0, ego_progress=f32(0.3 * k)) for k in range(3)
        ],
        selected_index=2,
    ),
    "Detection2D": Detection2D(label="car", score=f32(0.7), x_min=10.5, y_min=20.0, x_max=110.25, y_max=90.0),
    "Detections2D": Detections2D(
        header=Header(stamp=HEADER.stamp, frame_id="camera_front_optical"),
        image_width=1920,
        image_height=1080,
        detections=[
            Detection2D(label="car", score=1.0, x_min=1.0, y_min=2.0, x_max=3.0, y_max=4.0),
            Detection2D(label="truck", score=0.5, x_min=100.0, y_min=200.0, x_max=300.0, y_max=400.0),
        ],
        raw_text='[{"bbox_2d": [1, 2, 3, 4], "label": "car"}]',
    ),
}
