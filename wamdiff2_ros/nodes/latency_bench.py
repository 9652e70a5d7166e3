"""End-to-end latency of the planner node: camera frame published -> trajectory received, across processes.

A planner process (started as the launch file starts it) is fed frames and odometry from this process at a
fixed rate over real DDS, and a straight route (a route model plans only with one, as a navigation system
gives it); each received trajectory is matched to its frame by the header stamp (the frame's stamp is its
publish time on the shared system clock). Reported: p50 / p99 latency of the model's plans, the frames
planned, those answered by the fallback and those the newest-frame-wins worker dropped, and the planner's
own stage medians from its last /diagnostics (``delivery``: the frame's stamp to the node's callback,
``queue``: callback to worker start, ``convert``, ``Planner.plan``'s stages, then ``publish``: the four
outputs), so the time DDS and the node add shows beside the plan's, and the largest GPU memory the planner
reported.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as NavPath  # pathlib's Path names files here
from std_msgs.msg import Header

from wamdiff2_ros.msg import PlannedTrajectory
from wamdiff2_ros.nodes import qos
from wamdiff2_ros.nodes.bag_io import with_node
from wamdiff2_ros.nodes.convert.images import numpy_to_image
from wamdiff2_ros.nodes.convert.odometry import stamp_ns
from wamdiff2_ros.nodes.convert.route import path_from_points
from wamdiff2_ros.nodes.launch_spec import TOPICS, command_line, node_specs, share_dir, transport_environment

INPUTS = TOPICS["default"]  # the launch file's remappings for the default preset


def start_planner(preset: str, device: str, overrides: dict, log: Path) -> subprocess.Popen:
    """The planner as the launch file starts it (default preset), with ``overrides``."""
    spec = node_specs(share_dir(), model_preset=preset)[0]
    command = command_line(spec, {"model.device": device, **overrides})
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)


def measure(
    *,
    preset: str,
    device: str,
    width: int,
    height: int,
    rate_hz: float,
    frames: int,
    overrides: dict,
    log: Path,
    frame: Path | None = None,
    encoding: str = "bgr8",
    row_padding: int = 0,
) -> dict:
    """Publish ``frames`` frames at ``rate_hz`` into a fresh planner process; latency statistics in ms.

    The frame is the image file ``frame`` resized to ``width`` x ``height``, else seeded noise (out of any
    trained model's distribution: the slowest case for a dynamic commit rule), sent as ``encoding`` (bgr8, or
    bgra8 as the CARLA bridge sends it) with ``row_padding`` bytes after each row (``step`` > width x bytes).
    """
    if frame is None:
        pixels = np.random.default_rng(0).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    else:
        image = cv2.imread(str(frame), cv2.IMREAD_COLOR)
        if image is None:
            raise FileNotFoundError(f"cannot read an image from {frame}")
        pixels = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
    os.environ.update(transport_environment(share_dir()))  # the planner inherits it: one transport for both
    planner = start_planner(preset, device, overrides, log)
    try:
        return with_node(
            "wamdiff2_latency_bench",
            lambda node: _drive(
                node, planner, log, camera_image(pixels, encoding, row_padding), rate_hz, frames
            ),
        )
    finally:
        planner.terminate()
        planner.wait(10)


def camera_image(pixels_bgr: np.ndarray, encoding: str, row_padding: int):
    """A ``sensor_msgs/Image`` of ``pixels_bgr`` in ``encoding`` (bgr8 or bgra8), each row followed by
    ``row_padding`` bytes."""
    if encoding == "bgra8":
        alpha = np.full((*pixels_bgr.shape[:2], 1), 255, dtype=np.uint8)
        pixels_bgr = np.concatenate([pixels_bgr, alpha], axis=2)
    image = numpy_to_image(pixels_bgr, encoding)
    if row_padding:
        rows = np.frombuffer(bytes(image.data), dtype=np.uint8).reshape(image.height, image.step)
        image.data = np.pad(rows, ((0, 0), (0, row_padding))).tobytes()
        image.step += row_padding
    return image


def _drive(node, planner: subprocess.Popen, log: Path, image, rate_hz: float, frames: int) -> dict:
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image

    received: dict[int, float] = {}
    in_node_ms: dict[int, float] = {}  # per frame: the node's own receipt-to-result time (DecoderInfo)
    fallbacks: set[int] = set()  # frames answered by the fallback, not the model

    def on_trajectory(msg: PlannedTrajectory) -> None:
        stamp = stamp_ns(msg.header)
        received.setdefault(stamp, time.time_ns())
        in_node_ms.setdefault(stamp, msg.decoder.latency_ms)
        if msg.status == PlannedTrajectory.STATUS_FALLBACK:
            fallbacks.add(stamp)

    stages: dict[str, float] = {}
    gpu_memory_mb: list[float] = []  # the planner's allocated GPU memory, from each report

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            for kv in status.values:
                if kv.key.startswith("stage_p50_ms."):
                    stages[kv.key.removeprefix("stage_p50_ms.")] = float(kv.value)
                elif kv.key == "gpu_memory_allocated_mb":
                    gpu_memory_mb.append(float(kv.value))

    diagnostics = node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, qos.RELIABLE)
    trajectories = node.create_subscription(
        PlannedTrajectory,
        "/wamdiff2_planner/output/trajectory",
        on_trajectory,
        qos.RELIABLE,
    )
    image_publisher = node.create_publisher(Image, INPUTS["image"], qos.RELIABLE)
    odometry_publisher = node.create_publisher(Odometry, INPUTS["odometry"], qos.RELIABLE)
    # A route model plans only with its route: one straight ahead of the ego, latched as a navigation stack
    # publishes it (a model of another rule never reads it)
    route_publisher = node.create_publisher(NavPath, INPUTS["route"], qos.LATCHED)
    ahead = np.arange(-10.0, 400.0, 2.0)  # the bench's ego stands at the origin of its odometry's frame
    route_publisher.publish(path_from_points("camera", np.stack([ahead, np.zeros_like(ahead)], axis=1)))
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    deadline = time.monotonic() + 600.0  # a GPU planner warms up (compile, capture) before it is ready
    while " ready on " not in log.read_text():
        if planner.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"planner did not start:\n{log.read_text()[-2000:]}")
        executor.spin_once(timeout_sec=0.2)
    # Frames published before discovery matched both ends are lost, not dropped by the planner: wait for it.
    endpoints = (
        image_publisher.get_subscription_count,
        odometry_publisher.get_subscription_count,
        route_publisher.get_subscription_count,  # matched: the latched route is on its way before a frame
        trajectories.get_publisher_count,
    )
    while not all(count() > 0 for count in endpoints):
        if time.monotonic() > deadline:
            raise RuntimeError("the planner's topics were never matched (DDS discovery)")
        executor.spin_once(timeout_sec=0.05)
    sent: list[int] = []
    next_send = time.monotonic() + 0.5  # the planner's side of the match may lag ours
    while len(sent) < frames:
        executor.spin_once(timeout_sec=max(0.0, min(0.01, next_send - time.monotonic())))
        if time.monotonic() >= next_send:
            now_ns = time.time_ns()
            header = Header(frame_id="camera")
            header.stamp.sec, header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
            odometry = Odometry(header=header)
            odometry.twist.twist.linear.x = 10.0
            odometry_publisher.publish(odometry)
            image.header = header
            image_publisher.publish(image)
            odometry_publisher.publish(odometry)
            sent.append(now_ns)
            next_send += 1.0 / rate_hz
    settle = time.monotonic() + 10.0
    while time.monotonic() < settle and not (set(sent) <= set(received)):
        executor.spin_once(timeout_sec=0.1)
    stages.clear()  # the next report covers every plan
    report = time.monotonic() + 5.0
    while time.monotonic() < report and not stages:
        executor.spin_once(timeout_sec=0.1)
    node.destroy_subscription(diagnostics)
    answered = [s for s in sent if s in received]
    planned = [s for s in answered if s not in fallbacks]  # the model's plans: what the latencies are of
    latencies_ms = np.array([(received[s] - s) / 1e6 for s in planned])
    # Outside the node's receipt-to-result: delivery to the node, publishing, the trajectory's way back.
    outside_ms = latencies_ms - np.array([in_node_ms[s] for s in planned])
    if latencies_ms.size == 0:
        fell_back = len(answered) - len(planned)
        tail = log.read_text()[-2000:]
        raise RuntimeError(f"no model plan came back ({fell_back} fallbacks); planner log:\n{tail}")
    return {
        "frames_sent": len(sent),
        "frames_planned": int(latencies_ms.size),
        "frames_dropped": len(sent) - len(answered),
        "frames_fallback": len(answered) - len(planned),
        "latency_p50_ms": round(float(np.percentile(latencies_ms, 50)), 1),
        "latency_p99_ms": round(float(np.percentile(latencies_ms, 99)), 1),
        "latency_min_ms": round(float(latencies_ms.min()), 1),
        "outside_node_p50_ms": round(float(np.percentile(outside_ms, 50)), 1),
        "planner_stage_p50_ms": stages,
        "gpu_memory_allocated_mb_max": max(gpu_memory_mb) if gpu_memory_mb else None,  # None: a CPU model
    }
