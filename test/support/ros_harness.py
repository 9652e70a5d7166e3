"""Start package nodes as separate processes (as the launch file does) and observe their topics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile


def node_command(module: str, namespace: str, params: dict, remaps: dict | None = None) -> list[str]:
    """``python -m <module> --ros-args`` with a namespace, parameters and remappings."""
    command = [sys.executable, "-m", module, "--ros-args", "-r", f"__ns:={namespace}"]
    for name, value in params.items():
        rendered = (
            str(value).lower()
            if isinstance(value, bool)
            else repr(value)
            if isinstance(value, str)
            else str(value)
        )
        command += ["-p", f"{name}:={rendered}"]
    for source, target in (remaps or {}).items():
        command += ["-r", f"{source}:={target}"]
    return command


def start_process(command: list[str]) -> subprocess.Popen:
    """A node process in its own process group, its output in a temporary file (see ``node_output``)."""
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (lives as long as the process)
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    process.log = log
    return process


def start_node(module: str, namespace: str, params: dict, remaps: dict | None = None) -> subprocess.Popen:
    return start_process(node_command(module, namespace, params, remaps))


def node_output(process: subprocess.Popen) -> str:
    process.log.seek(0)
    return process.log.read()


def stop_node(process: subprocess.Popen, timeout_s: float = 10.0) -> str:
    """SIGINT (a clean rclpy shutdown), then kill; returns what the node printed."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return node_output(process)


class Probe:
    """A test-side node that records what arrives on the given topics."""

    def __init__(self, context, name: str, topics: dict[str, type], qos: QoSProfile | None = None) -> None:
        self.node: Node = rclpy.create_node(name, context=context)
        self.received: dict[str, list] = defaultdict(list)
        for topic, msg_type in topics.items():
            self.node.create_subscription(
                msg_type,
                topic,
                lambda msg, t=topic: self.received[t].append(msg),
                qos or QoSProfile(depth=50),
            )
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)

    def spin_until(
        self, condition: Callable[[], bool], timeout_s: float, during: Callable[[], None] | None = None
    ):
        """Spin until ``condition()``; ``during`` runs between spins (e.g. to keep publishing)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if during is not None:
                during()
            self.executor.spin_once(timeout_sec=0.05)
            if condition():
                return True
        return False

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
