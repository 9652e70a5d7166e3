"""What receiving camera frames costs the planner's process: the executor's take of a 1080p frame, and the
slowdown it causes in a worker thread that needs the GIL between device waits (the GPU plan's host loop).

The planner node's worker slowed by ~9 ms a plan on the H200 when 1080p frames came at 20 Hz instead of
6 Hz (docs/BENCHMARKS.md, "The planner node on the H200"); rclpy's ``Subscription.take_message`` holds the
GIL while FastDDS hands over and copies the 6.2 MB frame. This probe measures that without a model: a
publisher process sends bgr8 frames at RATE Hz; the subscriber process spins an executor on its main
thread (as the node does) and runs a worker loop in another (Python work for ``WORK_US``, then a GIL-free
wait for ``WAIT_US``, like a replay and its sync), and reports the worker's mean iteration time before
and while frames arrive and the executor thread's CPU time per frame taken. Usage (the ROS wheels and
the package's messages installed; on the device machine after ``tools/build_interfaces.py --install``):
``python3 tools/probes/frame_take.py OUT.json [RATE]``; one JSON line per configuration on stdout too.
"""

from __future__ import annotations

import array
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

WIDTH, HEIGHT = 1920, 1080
WORK_US, WAIT_US = 300, 2000
SECONDS = 10.0
CONFIGS = [  # (executor, raw subscription, switch interval in ms, frame buffers kept in the heap)
    ("single", False, 5.0, False),
    ("single", True, 5.0, False),
    ("events", False, 5.0, False),
    ("single", False, 0.5, False),
    ("single", False, 5.0, True),  # the planner's opt-in (wamdiff2_ros/nodes/allocator.py)
]
TOPIC = "/probe/image"


def publish(rate_hz: float, seconds: float) -> None:
    import rclpy
    from rclpy.node import Node
    from sensor_msgs.msg import Image

    from wamdiff2_ros.nodes import qos

    rclpy.init()
    node = Node("frame_take_publisher")
    publisher = node.create_publisher(Image, TOPIC, qos.RELIABLE)
    image = Image(height=HEIGHT, width=WIDTH, encoding="bgr8", step=WIDTH * 3)
    pixels = np.random.default_rng(0).integers(0, 256, HEIGHT * WIDTH * 3, dtype=np.uint8)
    image.data = array.array("B", pixels.tobytes())
    while publisher.get_subscription_count() == 0:
        time.sleep(0.05)
    time.sleep(0.5)
    end = next_send = time.monotonic()
    end += seconds
    while time.monotonic() < end:
        publisher.publish(image)
        next_send += 1.0 / rate_hz
        time.sleep(max(0.0, next_send - time.monotonic()))
    node.destroy_node()
    rclpy.shutdown()


def worker_iterations(count: int) -> list[float]:
    """Seconds of each of ``count`` iterations: Python work holding the GIL, then a wait releasing it."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        busy_until = started + WORK_US * 1e-6
        while time.perf_counter() < busy_until:
            pass
        time.sleep(WAIT_US * 1e-6)
        times.append(time.perf_counter() - started)
    return times


def subscribe(executor_kind: str, raw: bool, switch_ms: float, heap: bool, seconds: float) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.experimental import EventsExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import Image

    from wamdiff2_ros.nodes import qos
    from wamdiff2_ros.nodes.allocator import keep_frame_buffers_in_heap

    if heap:
        keep_frame_buffers_in_heap()
    sys.setswitchinterval(switch_ms / 1000)
    rclpy.init()
    node = Node("frame_take_subscriber")
    frames = []
    node.create_subscription(Image, TOPIC, lambda msg: frames.append(1), qos.RELIABLE, raw=raw)
    executor = EventsExecutor() if executor_kind == "events" else SingleThreadedExecutor()
    executor.add_node(node)
    stop, spin_cpu_s = threading.Event(), [0.0]

    def spin() -> None:
        while not stop.is_set():
            started = time.thread_time()
            executor.spin_once(timeout_sec=0.05)
            spin_cpu_s[0] += time.thread_time() - started

    before: list[float] = []
    during: list[float] = []

    def work() -> None:
        before.extend(worker_iterations(300))  # the publisher waits for the match and 0.5 s more
        while not frames:
            time.sleep(0.01)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            during.extend(worker_iterations(50))
        stop.set()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    spin()  # on the main thread, as the node's rclpy.spin: glibc serves it from the main arena
    worker.join()
    return {
        "executor": executor_kind,
        "raw": raw,
        "switch_interval_ms": switch_ms,
        "frame_buffers_in_heap": heap,
        "frames": len(frames),
        "worker_iteration_mean_ms": {
            "before": round(statistics.mean(before) * 1e3, 3),
            "during": round(statistics.mean(during) * 1e3, 3),
        },
        "worker_slowdown": round(statistics.mean(during) / statistics.mean(before) - 1, 3),
        # only meaningful for the SingleThreadedExecutor: the EventsExecutor takes on its own threads
        "spin_thread_cpu_ms_per_frame": round(spin_cpu_s[0] * 1e3 / max(len(frames), 1), 2),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    from wamdiff2_ros.nodes.launch_spec import share_dir, transport_environment

    out, rate_hz = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    env = {**os.environ, **transport_environment(share_dir())}  # the node's own transport (shared memory)
    rows = []
    for executor_kind, raw, switch_ms, heap in CONFIGS:
        publisher = subprocess.Popen(
            [sys.executable, __file__, "--publish", str(rate_hz), str(SECONDS + 4)], env=env
        )
        flags = [executor_kind, str(int(raw)), str(switch_ms), str(int(heap))]
        command = [sys.executable, __file__, "--subscribe", *flags]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        publisher.wait()
        row = {"rate_hz": rate_hz, **json.loads(result.stdout.strip().splitlines()[-1])}
        print(json.dumps(row), flush=True)
        rows.append(row)
        with open(out, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--publish":
        publish(float(sys.argv[2]), float(sys.argv[3]))
    elif sys.argv[1] == "--subscribe":
        executor_kind, raw, switch_ms, heap = sys.argv[2:6]
        print(json.dumps(subscribe(executor_kind, raw == "1", float(switch_ms), heap == "1", SECONDS)))
        sys.stdout.flush()
        os._exit(0)  # rclpy's executors can block interpreter exit with a live publisher
    else:
        main()
