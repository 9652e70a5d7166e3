"""A separate process that receives messages over DDS and writes their raw CDR bytes to a file.

Usage: python dds_peer.py OUT_FILE QOS TOPIC=pkg/msg/Type [TOPIC=pkg/msg/Type ...]
QOS is "reliable" or "sensor" (best effort, keep last 5). The peer exits 0 once every topic delivered one
message; the records are "<topic>\\n<length>\\n<bytes>" in arrival order. Exit 2 after 30 s without all.
Its last stdout line is JSON naming the files its wamdiff2_ros messages were loaded from.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

import rclpy
from rclpy.qos import QoSProfile, qos_profile_sensor_data


def message_class(type_name: str):
    package, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


def main() -> int:
    out_path, qos_name, *pairs = sys.argv[1:]
    qos = qos_profile_sensor_data if qos_name == "sensor" else QoSProfile(depth=10)
    rclpy.init()
    node = rclpy.create_node("dds_peer")
    received: dict[str, bytes] = {}
    for pair in pairs:
        topic, type_name = pair.split("=")
        node.create_subscription(
            message_class(type_name), topic, lambda raw, t=topic: received.setdefault(t, raw), qos, raw=True
        )
    deadline = time.monotonic() + 30.0
    print("ready", flush=True)
    while len(received) < len(pairs) and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    with open(out_path, "wb") as out:
        for topic, raw in received.items():
            out.write(f"{topic}\n{len(raw)}\n".encode() + raw)
    node.destroy_node()
    rclpy.shutdown()
    maps = Path("/proc/self/maps").read_text().splitlines()
    loaded = sorted({line.split()[-1] for line in maps if "wamdiff2_ros" in line})
    python_module = getattr(sys.modules.get("wamdiff2_ros.msg"), "__file__", None)
    print(json.dumps({"libraries": loaded, "python": python_module}), flush=True)
    return 0 if len(received) == len(pairs) else 2


if __name__ == "__main__":
    sys.exit(main())
