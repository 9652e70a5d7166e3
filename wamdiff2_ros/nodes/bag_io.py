"""Bag replay and recording without rosbag2: rosbags reads and writes the files, rclpy moves raw CDR.

``play`` publishes a rosbag2 bag (MCAP or sqlite3) in stamp order at ``rate`` times real time, the bytes as
stored (no deserialisation). With ``clock`` it publishes ``/clock`` from the bag's time at ``clock_hz``, as
``ros2 bag play --clock`` does, and leaves out a ``/clock`` topic recorded in the bag so there is one time
source. ``record`` writes what arrives on some topics into a new MCAP bag (receive time as the bag time).
"""

from __future__ import annotations

import importlib
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rosgraph_msgs.msg import Clock

from wamdiff2_ros.nodes import qos
from wamdiff2_ros.sim.bags import find_msg_file

CLOCK_TOPIC = "/clock"
T = TypeVar("T")


def message_class(type_name: str):
    """The rclpy message class of ``pkg/msg/Name``.

    Raises:
        ValueError: malformed name, or no such installed message type.
    """
    try:
        package, kind, name = type_name.split("/")
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ValueError, ImportError, AttributeError) as error:
        raise ValueError(f"message type {type_name!r} is not installed here ({error})") from None


def package_typestore():
    """A Kilted rosbags typestore that also knows every message of this package (from its .msg files)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    typestore = get_typestore(Stores.ROS2_KILTED)
    types = {}
    for msg_file in sorted(find_msg_file("DrivingCommand").parent.glob("*.msg")):
        types.update(get_types_from_msg(msg_file.read_text(), f"wamdiff2_ros/msg/{msg_file.stem}"))
    typestore.register(types)
    return typestore


class BagPlayer:
    """Publishes a bag through ``node``, once or pass after pass, with publishers made once and destroyed at
    the end (a loop that made new ones per pass left every earlier writer matched in every subscriber: that
    grew the soaked planner by 160 MiB in 30 minutes and halved its plan rate).

    Use as a context manager; ``play_once`` publishes one pass (a further pass starts the bag's time again,
    so /clock jumps back as a looping bag's does).

    Args:
        node: the node that owns the publishers (not spun here: publishing needs no executor).
        path: bag directory (rosbag2 MCAP or sqlite3, metadata.yaml version <= 9).
        rate: playback speed, > 0.
        clock: publish /clock from the bag's time.
        clock_hz: /clock rate in bag time.
        topics: only these topics (all when empty).
        discovery_wait_s: after creating the publishers, wait until each has matched a subscriber, at most
            this long (a topic nobody subscribes to yet waits it out).

    Raises:
        ValueError: rate <= 0, or a message type that is not installed here.
        rosbags.rosbag2.ReaderError: the bag cannot be read.
    """

    def __init__(
        self,
        node: Node,
        path: Path,
        *,
        rate: float = 1.0,
        clock: bool = False,
        clock_hz: float = 40.0,
        topics: Sequence[str] = (),
        discovery_wait_s: float = 1.0,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.node, self.path, self.rate, self.clock_hz = node, path, rate, clock_hz
        self.clock, self.topics, self.discovery_wait_s = clock, topics, discovery_wait_s
        self._reader = None

    def __enter__(self) -> BagPlayer:
        from rosbags.rosbag2 import Reader

        self._reader = Reader(self.path)
        self._reader.open()
        clock, topics = self.clock, self.topics
        self._connections = [
            c
            for c in self._reader.connections
            if (not topics or c.topic in topics) and not (clock and c.topic == CLOCK_TOPIC)
        ]
        node = self.node
        self._publishers = {
            c.id: node.create_publisher(message_class(c.msgtype), c.topic, _publisher_qos(c))
            for c in self._connections
        }
        self._clock_publisher = (
            node.create_publisher(Clock, CLOCK_TOPIC, QoSProfile(depth=10)) if clock else None
        )
        everything = [*self._publishers.values(), *([self._clock_publisher] if clock else [])]
        _wait_for_subscribers(everything, self.discovery_wait_s)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for publisher in [*self._publishers.values(), self._clock_publisher]:
            if publisher is not None:
                self.node.destroy_publisher(publisher)
        self._reader.close()

    def play_once(self) -> Counter:
        """Publish the bag once at ``rate``; returns messages published per topic."""
        published: Counter = Counter()
        clock_publisher, rate = self._clock_publisher, self.rate
        wall_start, bag_start, next_clock_ns = time.monotonic(), None, None
        clock_step_ns = int(1e9 / self.clock_hz)
        for connection, stamp_ns, raw in self._reader.messages(connections=self._connections):
            bag_start = stamp_ns if bag_start is None else bag_start
            next_clock_ns = stamp_ns if next_clock_ns is None else next_clock_ns
            # /clock ticks due before this message go out at their own (scaled) wall times.
            while clock_publisher is not None and next_clock_ns <= stamp_ns:
                _sleep_until(wall_start + (next_clock_ns - bag_start) / 1e9 / rate)
                clock_publisher.publish(_clock(next_clock_ns))
                published[CLOCK_TOPIC] += 1
                next_clock_ns += clock_step_ns
            _sleep_until(wall_start + (stamp_ns - bag_start) / 1e9 / rate)
            self._publishers[connection.id].publish(bytes(raw))  # raw CDR, as stored
            published[connection.topic] += 1
        return published


def _publisher_qos(connection) -> QoSProfile:
    """Reliable with a queue of 10; a topic recorded latched is replayed latched."""
    from rosbags.interfaces import QosDurability

    offered = getattr(connection.ext, "offered_qos_profiles", None) or []
    if any(q.durability == QosDurability.TRANSIENT_LOCAL for q in offered):
        return qos.LATCHED
    return QoSProfile(depth=10)


def _offered_latched(node: Node, topic: str) -> bool:
    """Every publisher of ``topic`` offers it latched (as the CARLA bridge its route): recorded latched."""
    offered = [info.qos_profile.durability for info in node.get_publishers_info_by_topic(topic)]
    return bool(offered) and all(d == DurabilityPolicy.TRANSIENT_LOCAL for d in offered)


def camera_size(path: Path) -> tuple[int, int] | None:
    """(width, height) of the first ``sensor_msgs/msg/Image`` in a bag; None when it holds none."""
    from rosbags.rosbag2 import Reader

    typestore = package_typestore()
    with Reader(path) as reader:
        images = [c for c in reader.connections if c.msgtype == "sensor_msgs/msg/Image"]
        for connection, _, raw in reader.messages(connections=images) if images else ():
            image = typestore.deserialize_cdr(raw, connection.msgtype)
            return int(image.width), int(image.height)
    return None


def play(node: Node, path: Path, **options) -> Counter:
    """Publish a bag once through ``node`` (``BagPlayer``'s options); returns messages published per topic."""
    with BagPlayer(node, path, **options) as player:
        return player.play_once()


def _wait_for_subscribers(publishers: list, timeout_s: float) -> None:
    """Return once every publisher has matched a subscriber, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(p.get_subscription_count() == 0 for p in publishers) and time.monotonic() < deadline:
        time.sleep(0.01)


def _sleep_until(wall_s: float) -> None:
    delay = wall_s - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _clock(stamp_ns: int) -> Clock:
    msg = Clock()
    msg.clock.sec, msg.clock.nanosec = divmod(stamp_ns, 1_000_000_000)
    return msg


def record(
    node: Node, path: Path, topics: Sequence[str], duration_s: float, type_wait_s: float = 5.0
) -> Counter:
    """Record ``topics`` into a new MCAP bag at ``path`` for ``duration_s``; returns messages per topic.

    Topic types are taken from the ROS graph (waiting up to ``type_wait_s`` for each to appear).

    Raises:
        ValueError: a topic whose type did not appear, or one with several types.
        rosbags.rosbag2.WriterError: ``path`` exists already.
    """
    from rclpy.executors import SingleThreadedExecutor
    from rosbags.rosbag2 import StoragePlugin, Writer

    from wamdiff2_ros.sim.bags import latched_qos

    types = _topic_types(node, topics, type_wait_s)
    latched = {t for t in topics if _offered_latched(node, t)}
    typestore = package_typestore()
    recorded: Counter = Counter()
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections = {
            t: writer.add_connection(
                t, types[t], typestore=typestore, offered_qos_profiles=[latched_qos()] if t in latched else ()
            )
            for t in topics
        }

        def store(topic: str, raw: bytes) -> None:
            writer.write(connections[topic], node.get_clock().now().nanoseconds, raw)
            recorded[topic] += 1

        subscriptions = [
            node.create_subscription(
                message_class(types[t]),
                t,
                lambda raw, t=t: store(t, raw),
                qos.LATCHED if t in latched else QoSProfile(depth=100),
                raw=True,
            )
            for t in topics
        ]
        executor = SingleThreadedExecutor(context=node.context)
        executor.add_node(node)
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=min(0.1, max(deadline - time.monotonic(), 0.0)))
        executor.remove_node(node)
        for subscription in subscriptions:
            node.destroy_subscription(subscription)
    return recorded


def _topic_types(node: Node, topics: Sequence[str], wait_s: float) -> dict[str, str]:
    deadline = time.monotonic() + wait_s
    while True:
        graph = dict(node.get_topic_names_and_types())
        if all(t in graph for t in topics) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    missing = [t for t in topics if t not in graph]
    if missing:
        raise ValueError(f"no publisher of {missing} appeared within {wait_s} s, so their types are unknown")
    ambiguous = {t: graph[t] for t in topics if len(graph[t]) != 1}
    if ambiguous:
        raise ValueError(f"topics with several types cannot be recorded: {ambiguous}")
    return {t: graph[t][0] for t in topics}


def with_node(name: str, action: Callable[[Node], T]) -> T:
    """Run ``action(node)`` with a node of its own rclpy context, on the nodes' large-data transport.

    The transport profile is the launch file's (unless the user chose one): a player must speak the same
    transport as the nodes it feeds, or large best-effort frames never arrive.
    """
    from wamdiff2_ros.nodes.launch_spec import share_dir, transport_environment

    os.environ.update(transport_environment(share_dir()))
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(name, context=context)
    try:
        return action(node)
    finally:
        node.destroy_node()
        context.try_shutdown()
