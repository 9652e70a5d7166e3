"""The demo: a generated drive, replayed through the real planner and scorer nodes, recorded and drawn.

Steps: (1) simulate one seeded drive and write it as a rosbag2 MCAP bag with CARLA-bridge topics and /clock;
(2) start the planner and scorer executables exactly as ``planner.launch.py config:=carla use_sim_time:=true``
does; (3) play the bag with /clock while recording the nodes' outputs into a second bag; (4) read both bags
and write a contact sheet, a GIF and open-loop metrics against where the simulated car really drove.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rclpy

from wamdiff2_ros.eval.drive_report import (
    ReportFrame,
    animation,
    contact_sheet,
    open_loop_metrics,
    write_metrics,
)
from wamdiff2_ros.geometry import map_to_ego
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS, WAYPOINT_DT_S
from wamdiff2_ros.msg import PlannedTrajectory
from wamdiff2_ros.nodes.bag_io import package_typestore, play, record
from wamdiff2_ros.nodes.launch_spec import TOPICS, command_line, node_specs, share_dir, transport_environment

PLANNER_OUTPUTS = (
    "/wamdiff2_scorer/output/scored",
    "/wamdiff2_planner/output/detections",
    "/wamdiff2_planner/output/trajectory",
)
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DemoOutputs:
    drive_bag: Path
    outputs_bag: Path
    contact_sheet: Path
    animation: Path
    metrics: Path
    summary: dict


def generate_drive(out: Path, seconds: float, seed: int, command_rule: str) -> tuple[Path, Path]:
    """One simulated drive, its commands by ``command_rule``: its bag and the scene folder (camera.json,
    ground truth of sampled frames)."""
    from wamdiff2_ros.sim.dataset import GenerateConfig, generate

    scenes = out / "scenes"
    if scenes.exists():  # a previous demo's drive: the bag writer refuses to overwrite it
        shutil.rmtree(scenes)
    # The expert's 4 s horizon is part of an episode; one sample keeps it to one episode.
    config = GenerateConfig(
        scenes, 1, seed, episode_s=seconds + 4.0, bags=True, workers=1, command_rule=command_rule
    )
    generate(config)
    return scenes / "bags" / "drive_000000", scenes


def start_nodes(model: str, preset: str, overrides: dict, log_dir: Path) -> list[subprocess.Popen]:
    """Planner and scorer as ``planner.launch.py config:=carla use_sim_time:=true`` starts them;
    ``overrides`` go to the planner."""
    env = {**os.environ, **transport_environment(share_dir())}  # unless the user chose a transport
    processes = []
    for spec in node_specs(share_dir(), preset="carla", model=model, model_preset=preset, use_sim_time=True):
        command = command_line(spec, overrides if spec.executable == "planner_node" else None)
        log = (log_dir / f"{spec.name}.log").open("w")
        processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
    return processes


def wait_until_ready(log: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text()
        if " ready on " in text:
            return
        if process.poll() is not None or "failed to load" in text:
            raise RuntimeError(f"the planner did not start; its log ({log}):\n{text[-3000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"the planner did not load its model within {READY_TIMEOUT_S} s; see {log}")


def stop_nodes(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def replay_and_record(drive: Path, outputs: Path, rate: float) -> None:
    """Play the drive with /clock while a second node records the planner and scorer outputs."""
    from rosbags.rosbag2 import Reader

    with Reader(drive) as reader:
        duration_s = reader.duration / 1e9
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        recorder = rclpy.create_node("wamdiff2_demo_recorder", context=context)
        player = rclpy.create_node("wamdiff2_demo_player", context=context)
        # Recording waits for the topics' types, i.e. for the nodes' publishers: start it first.
        thread = threading.Thread(
            target=record, args=(recorder, outputs, PLANNER_OUTPUTS, duration_s / rate + 8.0, 30.0)
        )
        thread.start()
        time.sleep(2.0)
        play(player, drive, rate=rate, clock=True)
        thread.join()
    finally:
        context.try_shutdown()


def _stamp_s(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def report_frames(drive: Path, outputs: Path) -> list[ReportFrame]:
    """Join the scored candidate sets with their camera frames, detections and the car's real future."""
    from rosbags.rosbag2 import Reader

    typestore = package_typestore()
    topics = TOPICS["carla"]
    images, poses = {}, []
    with Reader(drive) as reader:
        for connection, _, raw in reader.messages():
            if connection.topic == topics["image"]:
                msg = typestore.deserialize_cdr(raw, connection.msgtype)
                images[_stamp_s(msg.header)] = np.asarray(msg.data).reshape(msg.height, msg.width, 3)
            elif connection.topic == topics["odometry"]:
                msg = typestore.deserialize_cdr(raw, connection.msgtype)
                q = msg.pose.pose.orientation
                yaw = math.atan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))
                v = msg.twist.twist.linear
                poses.append(
                    (_stamp_s(msg.header), msg.pose.pose.position.x, msg.pose.pose.position.y, yaw, v.x, v.y)
                )
    poses_array = np.array(sorted(poses))
    scored, detections = [], {}
    with Reader(outputs) as reader:
        for connection, _, raw in reader.messages():
            msg = typestore.deserialize_cdr(raw, connection.msgtype)
            if connection.topic.endswith("/scored"):
                scored.append(msg)
            elif connection.topic.endswith("/detections"):
                detections[_stamp_s(msg.header)] = msg
    frames = []
    for msg in sorted(scored, key=lambda m: _stamp_s(m.header)):
        stamp = _stamp_s(msg.header)
        image = images.get(stamp)
        if image is None:
            continue
        candidates = [np.array([[p.position.x, p.position.y] for p in c.points]) for c in msg.candidates]
        found = detections.get(stamp)
        boxes = (
            np.array([[d.x_min, d.y_min, d.x_max, d.y_max] for d in found.detections])
            if found
            else np.zeros((0, 4))
        )
        status = (
            "fallback"
            if msg.candidates[msg.selected_index].status == PlannedTrajectory.STATUS_FALLBACK
            else ""
        )
        frames.append(
            ReportFrame(
                stamp_s=stamp - poses_array[0, 0],
                image_rgb=image,
                candidates_ego=candidates,
                selected=int(msg.selected_index),
                expert_ego=_future_ego(poses_array, stamp),
                constant_velocity_ego=_constant_velocity(poses_array, stamp),
                boxes_px=boxes.reshape(-1, 4),
                labels=[d.label for d in found.detections] if found else [],
                status=status,
                detected=found is not None,
            )
        )
    return frames


def _future_ego(poses: np.ndarray, stamp_s: float) -> np.ndarray | None:
    """Where the car was 0.5 .. 4 s after ``stamp_s``, in its ego frame at ``stamp_s`` (None past the bag)."""
    times = stamp_s + WAYPOINT_DT_S * np.arange(1, NUM_WAYPOINTS + 1)
    if times[-1] > poses[-1, 0] + 1e-6:
        return None
    now = np.searchsorted(poses[:, 0], stamp_s - 1e-6)
    xy = np.stack([np.interp(times, poses[:, 0], poses[:, k]) for k in (1, 2)], axis=1)
    return map_to_ego(xy, poses[now, 1:3], float(poses[now, 3]))


def _constant_velocity(poses: np.ndarray, stamp_s: float) -> np.ndarray:
    now = np.searchsorted(poses[:, 0], stamp_s - 1e-6)
    times = WAYPOINT_DT_S * np.arange(1, NUM_WAYPOINTS + 1)
    return np.outer(times, poses[now, 4:6])


def run_demo(out: Path, *, seconds: float, seed: int, model: str, preset: str, rate: float) -> DemoOutputs:
    """The whole demo (see the module docstring); writes everything under ``out``."""
    from wamdiff2_ros.model.checkpoint import read_command_rule
    from wamdiff2_ros.model.default import default_model_dir
    from wamdiff2_ros.model.prompt import DEFAULT_COMMAND_RULE
    from wamdiff2_ros.sim.dataset import load_camera

    out.mkdir(parents=True, exist_ok=True)
    # This process plays the bag: it must speak the nodes' large-data transport (640x360 frames are 690 KB,
    # beyond what default Fast DDS delivers best effort across processes).
    os.environ.update(transport_environment(share_dir()))
    # the route planner speaks the model's command rule (a preset's random weights read none)
    rule = DEFAULT_COMMAND_RULE if preset and not model else read_command_rule(model or default_model_dir())
    drive, scenes = generate_drive(out, seconds, seed, rule)
    outputs = out / "outputs_bag"
    if outputs.exists():
        shutil.rmtree(outputs)
    # Fewer denoising steps keep the CPU planner near the replayed frame rate (reference default: 32).
    overrides = {"output.detections_every_n": 3, "input.max_age_s": 2.0, "decoder.steps": 8}
    processes = start_nodes(model, preset, overrides, out)
    try:
        wait_until_ready(out / "wamdiff2_planner.log", processes[0])
        replay_and_record(drive, outputs, rate)
    finally:
        stop_nodes(processes)
    frames = report_frames(drive, outputs)
    if not frames:
        raise RuntimeError(f"the nodes produced no scored plans; see the logs in {out}")
    camera = load_camera(scenes)
    summary = open_loop_metrics(frames) | {
        "model": model or (f"preset:{preset} (random weights)" if preset else "default model"),
        "seed": seed,
    }
    return DemoOutputs(
        drive_bag=drive,
        outputs_bag=outputs,
        contact_sheet=contact_sheet(frames, camera, out / "contact_sheet.png"),
        animation=animation(frames, camera, out / "drive.gif"),
        metrics=write_metrics(summary, out / "metrics.json"),
        summary=summary,
    )
