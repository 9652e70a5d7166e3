"""ScorerNode as a separate process: scores candidates against detections and picks what its scores say."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from ros_harness import Probe, node_output, start_node, stop_node
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.msg import CandidateTrajectories, Detection2D, Detections2D, PlannedTrajectory
from wamdiff2_ros.nodes.convert.trajectories import planned_trajectory
from wamdiff2_ros.nodes.qos import RELIABLE

NS = "/scorer_test"
NODE = f"{NS}/wamdiff2_scorer"
CAMERA = Camera()
STRAIGHT_10MPS = np.stack([5.0 * np.arange(1, 9), np.zeros(8)], axis=1)
STOP_AT_6M = np.stack([np.minimum(2.0 * np.arange(1, 9), 6.0), np.zeros(8)], axis=1)


def car_box(x_m: float, y_m: float) -> Detection2D:
    u, v = CAMERA.project_ego(np.array([[x_m, y_m, 0.0]]))[0]
    return Detection2D(label="car", score=1.0, x_min=u - 60, y_min=v - 80, x_max=u + 60, y_max=v)


@pytest.fixture(scope="module")
def scorer(ros_context):
    process = start_node("wamdiff2_ros.nodes.scorer", NS, {"diagnostics.period_s": 0.5})
    outputs = {f"{NODE}/output/scored": CandidateTrajectories, f"{NODE}/output/trajectory": PlannedTrajectory}
    probe = Probe(ros_context, "scorer_probe", outputs)
    node = probe.node
    publishers = {
        "candidates": node.create_publisher(CandidateTrajectories, f"{NODE}/input/candidates", RELIABLE),
        "detections": node.create_publisher(Detections2D, f"{NODE}/input/detections", RELIABLE),
        "camera_info": node.create_publisher(CameraInfo, f"{NODE}/input/camera_info", RELIABLE),
        "odometry": node.create_publisher(Odometry, f"{NODE}/input/odometry", RELIABLE),
    }
    yield process, probe, publishers
    probe.close()
    stop_node(process)


def score(
    scorer, detections: list[Detection2D], stamp: Time, seen: Callable | None = None
) -> CandidateTrajectories:
    """Score the two candidates at ``stamp``; each test uses its own stamp, so older detections (beyond
    detections.max_age_s) cannot leak into its result. ``seen``: also wait for a scored set it accepts
    (the detections topic may match later than the others, and its first messages then go nowhere)."""
    process, probe, publishers = scorer
    header = Header(stamp=stamp, frame_id="ego_vehicle")
    k = CAMERA.intrinsics
    info = CameraInfo(
        header=Header(stamp=stamp, frame_id="camera_front"), width=k.width_px, height=k.height_px
    )
    info.k = [k.fx_px, 0.0, k.cx_px, 0.0, k.fy_px, k.cy_px, 0.0, 0.0, 1.0]
    odometry = Odometry(header=Header(stamp=stamp))
    odometry.twist.twist.linear.x = 10.0
    candidates = CandidateTrajectories(
        header=header,
        candidates=[planned_trajectory(header, STRAIGHT_10MPS), planned_trajectory(header, STOP_AT_6M)],
        selected_index=-1,
    )
    image_header = Header(stamp=stamp, frame_id="camera_front")
    topic = f"{NODE}/output/scored"

    matched = probe.spin_until(lambda: all(p.get_subscription_count() > 0 for p in publishers.values()), 30)
    assert matched, "the scorer did not subscribe to every input:\n" + node_output(process)

    def publish():
        publishers["camera_info"].publish(info)
        publishers["odometry"].publish(odometry)
        publishers["detections"].publish(
            Detections2D(header=image_header, image_width=1920, image_height=1080, detections=detections)
        )
        publishers["candidates"].publish(candidates)

    arrived = probe.spin_until(
        lambda: (
            len(mine := [m for m in probe.received[topic] if m.header.stamp == stamp]) >= 8
            and (seen is None or seen(mine[-1]))
        ),
        30,
        during=publish,
    )
    assert arrived, node_output(process)
    # Topics are independent: the first set may be scored before the detections arrived; later ones not.
    return [m for m in probe.received[topic] if m.header.stamp == stamp][-1]


@pytest.mark.ros
def test_scorer_avoids_the_candidate_that_hits_a_detected_car(scorer) -> None:
    scored = score(scorer, [car_box(12.0, 0.0)], Time(sec=1000), seen=lambda m: m.selected_index == 1)
    totals = [s.total for s in scored.scores]
    assert scored.selected_index == int(np.argmax(totals)) == 1
    assert scored.scores[0].no_collision == 0.0 and scored.scores[1].no_collision == 1.0


@pytest.mark.ros
def test_without_obstacles_the_farthest_safe_candidate_wins_and_is_republished(scorer) -> None:
    scored = score(scorer, [], Time(sec=2000))
    assert scored.selected_index == 0 and scored.scores[0].ego_progress == pytest.approx(1.0)
    _, probe, _ = scorer
    republished = [t for t in probe.received[f"{NODE}/output/trajectory"] if t.header.stamp == Time(sec=2000)]
    assert republished[-1] == scored.candidates[scored.selected_index]


@pytest.mark.ros
def test_when_every_candidate_hits_a_car_the_scorer_republishes_its_own_stop(scorer) -> None:
    stamp = Time(sec=3000)
    scored = score(scorer, [car_box(8.0, 0.0)], stamp, seen=lambda m: len(m.candidates) == 3)
    assert [s.no_collision for s in scored.scores[:2]] == [0.0, 0.0] and scored.selected_index == 2
    stop = scored.candidates[2]
    assert stop.status == PlannedTrajectory.STATUS_DEGRADED and "scorer stop" in stop.status_reason
    # The car is closer than a stop from 10 m/s at 6 m/s^2 needs: the hardest brake.
    assert stop.points[-1].speed == pytest.approx(0.0)
    assert stop.points[-1].position.x == pytest.approx(100 / 12)
    _, probe, _ = scorer
    republished = [t for t in probe.received[f"{NODE}/output/trajectory"] if t.header.stamp == stamp]
    assert republished[-1] == stop
