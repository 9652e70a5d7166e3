"""Soak: the planner and scorer, started as the launch file starts them for the CARLA bridge (sim time), fed
from a bag played in a loop with /clock for a given wall time.

Reports per window of wall time the plans received, their in-node latency (``DecoderInfo.latency_ms``: frame
received to plan out), statuses and the planner's resident memory; over the run the plans per second, every
trajectory that was not finite or not 8 points, each node's resident memory and open file descriptors at the
start and the end, the frames each node dropped, every change of a node's diagnostic level, and whether each
process is still the one started. The bag's clock jumps back at every loop, as a looping bag's does.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor

from wamdiff2_ros.msg import CandidateTrajectories, PlannedTrajectory
from wamdiff2_ros.nodes import qos
from wamdiff2_ros.nodes.bag_io import BagPlayer, camera_size
from wamdiff2_ros.nodes.demo import start_nodes, stop_nodes, wait_until_ready


def process_usage(pid: int) -> dict[str, float]:
    """Resident memory (MiB) and open file descriptors of a process (Linux /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"rss_mib": rss_kib / 1024, "open_fds": len(os.listdir(f"/proc/{pid}/fd"))}


class _Observer:
    """What the soak sees of the nodes' outputs, from the executor thread."""

    def __init__(self, node) -> None:
        self.lock = threading.Lock()
        self.plans: list[tuple[float, float, int, bool]] = []  # (wall s, latency ms, status, well formed)
        self.scored = 0
        self.levels: dict[str, int] = {}
        self.level_changes: list[dict] = []
        self.last_values: dict[str, dict[str, str]] = {}
        node.create_subscription(
            PlannedTrajectory, "/wamdiff2_planner/output/trajectory", self._plan, qos.RELIABLE
        )
        node.create_subscription(
            CandidateTrajectories, "/wamdiff2_scorer/output/scored", self._scored, qos.RELIABLE
        )
        node.create_subscription(DiagnosticArray, "/diagnostics", self._diagnostics, qos.RELIABLE)

    def _plan(self, msg: PlannedTrajectory) -> None:
        values = [v for p in msg.points for v in (p.position.x, p.position.y, p.heading, p.speed)]
        well_formed = len(msg.points) == 8 and all(math.isfinite(v) for v in values)
        with self.lock:
            self.plans.append((time.monotonic(), float(msg.decoder.latency_ms), msg.status, well_formed))

    def _scored(self, msg: CandidateTrajectories) -> None:
        with self.lock:
            self.scored += 1

    def _diagnostics(self, msg: DiagnosticArray) -> None:
        with self.lock:
            for status in msg.status:
                self.last_values[status.name] = {kv.key: kv.value for kv in status.values}
                level = (
                    int.from_bytes(status.level, "little")
                    if isinstance(status.level, bytes)
                    else status.level
                )
                if self.levels.get(status.name) != level:
                    self.levels[status.name] = level
                    self.level_changes.append(
                        {
                            "wall_s": time.monotonic(),
                            "node": status.name,
                            "level": level,
                            "message": status.message,
                        }
                    )


def soak(
    bag: Path,
    *,
    minutes: float,
    rate: float,
    log_dir: Path,
    model: str = "",
    preset: str = "",
    window_s: float = 60.0,
) -> dict:
    """Run the soak and return its report (see the module docstring).

    Args:
        bag: a rosbag2 folder with CARLA-bridge topics (``wamdiff2 sim generate --bags``, the demo's drive).
        minutes: wall time to feed the nodes.
        rate: playback speed (2.0 turns the demo's 10 Hz camera into 20 Hz).
        log_dir: where the nodes' logs go.
        model: checkpoint folder; empty with no ``preset``: the bundled default model.
        preset: random-weight model preset.
        window_s: wall seconds per reported window.
    """
    # Warmed up on the bag's own frame size, as a deployment sets warmup.image_size to its camera's (the
    # CARLA preset's is 800x600): the first frames then find the caches of their size built.
    size = camera_size(bag)
    overrides = {"warmup.image_size": f"{size[0]}x{size[1]}"} if size else {}
    processes = start_nodes(model, preset, overrides, log_dir)
    names = ("planner", "scorer")
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("wamdiff2_soak", context=context)
    observer = _Observer(node)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinning = threading.Thread(target=executor.spin, daemon=True)
    spinning.start()
    try:
        wait_until_ready(log_dir / "wamdiff2_planner.log", processes[0])
        started = time.monotonic()
        usage_start = {n: process_usage(p.pid) for n, p in zip(names, processes, strict=True)}
        loops = 0
        published: Counter = Counter()
        rss: list[tuple[float, float]] = []  # (wall s, planner RSS MiB) after each loop: growth over time
        with BagPlayer(node, bag, rate=rate, clock=True) as player:  # one set of publishers for every loop
            while time.monotonic() - started < minutes * 60:
                published += player.play_once()
                loops += 1
                rss.append((time.monotonic(), process_usage(processes[0].pid)["rss_mib"]))
        time.sleep(2.0)  # the last frames' plans are still on their way (a benchmark, not a test)
        usage_end = {n: process_usage(p.pid) for n, p in zip(names, processes, strict=True)}
        alive = {n: p.poll() is None for n, p in zip(names, processes, strict=True)}
        ended = time.monotonic()
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
        stop_nodes(processes)
    with observer.lock:
        plans, level_changes = list(observer.plans), list(observer.level_changes)
        last_values, scored = dict(observer.last_values), observer.scored
    windows = []
    for start in np.arange(started, ended, window_s):
        inside = [p for p in plans if start <= p[0] < start + window_s]
        latencies = [p[1] for p in inside]
        memory = [m for t, m in rss if start <= t < start + window_s]
        windows.append(
            {
                "minute": round((start - started) / 60, 2),
                "plans": len(inside),
                "latency_p50_ms": round(float(np.percentile(latencies, 50)), 1) if latencies else None,
                "latency_p99_ms": round(float(np.percentile(latencies, 99)), 1) if latencies else None,
                "statuses": dict(Counter(int(p[2]) for p in inside)),
                "planner_rss_mib": round(memory[-1], 1) if memory else None,
            }
        )
    growth = {
        n: {
            k: round(100 * (usage_end[n][k] - usage_start[n][k]) / usage_start[n][k], 2)
            for k in usage_start[n]
        }
        for n in names
    }
    planner_values = next((v for k, v in last_values.items() if k.endswith("wamdiff2_planner")), {})
    return {
        "bag": str(bag),
        "minutes": round((ended - started) / 60, 2),
        "rate": rate,
        "loops": loops,
        "frames_published": published.get("/carla/ego_vehicle/rgb_front/image", 0),
        "plans": len(plans),
        "plans_per_s": round(len(plans) / (ended - started), 2),
        "scored": scored,
        "malformed_or_non_finite": sum(not p[3] for p in plans),
        "usage_start": usage_start,
        "usage_end": usage_end,
        "growth_percent": growth,
        "processes_alive": alive,
        "planner_counts": {
            k: v for k, v in planner_values.items() if k.startswith(("frames_", "problem.", "note."))
        },
        "level_changes": [{**c, "wall_s": round(c["wall_s"] - started, 1)} for c in level_changes],
        "windows": windows,
    }
