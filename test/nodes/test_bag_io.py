"""Bag replay and recording without rosbag2: stamp order, rate, /clock, custom types, MCAP and sqlite3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import Point, Pose, PoseStamped
from message_samples import SAMPLES
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as Path_
from rclpy.qos import DurabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from ros_harness import Probe, node_output, start_node, stop_node
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from wamdiff2_ros.msg import PlannedTrajectory
from wamdiff2_ros.nodes import bag_io
from wamdiff2_ros.nodes.bag_io import BagPlayer, camera_size, package_typestore, play, record
from wamdiff2_ros.nodes.convert.images import image_to_numpy, numpy_to_image
from wamdiff2_ros.nodes.qos import route as route_qos
from wamdiff2_ros.sim.bags import latched_qos

START_NS = 5_000_000_000
TOPICS = {"/cam": ("sensor_msgs/msg/Image", Image), "/odom": ("nav_msgs/msg/Odometry", Odometry)}


def write_bag(path: Path, storage: StoragePlugin, frames: int = 10, period_ns: int = 50_000_000) -> None:
    """``frames`` images and odometry messages at 20 Hz, plus one PlannedTrajectory, written with rosbags."""
    typestore = package_typestore()
    with Writer(path, version=9, storage_plugin=storage) as writer:
        connections = {
            t: writer.add_connection(t, name, typestore=typestore) for t, (name, _) in TOPICS.items()
        }
        plan = writer.add_connection("/plan", "wamdiff2_ros/msg/PlannedTrajectory", typestore=typestore)
        for i in range(frames):
            stamp = START_NS + i * period_ns
            image = numpy_to_image(np.full((32, 48, 3), i, np.uint8), "bgr8")  # >= input.min_image_side_px
            image.header.stamp.sec, image.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
            odometry = Odometry()
            odometry.header.stamp = image.header.stamp
            odometry.pose.pose.position.x = float(i)
            writer.write(connections["/cam"], stamp, serialize_message(image))  # rclpy CDR == rosbags CDR
            writer.write(connections["/odom"], stamp, serialize_message(odometry))
        writer.write(plan, START_NS, serialize_message(SAMPLES["PlannedTrajectory"]))


def test_camera_size_is_the_first_image_s_and_none_without_images(tmp_path: Path) -> None:
    write_bag(tmp_path / "bag", StoragePlugin.MCAP, frames=2)
    assert camera_size(tmp_path / "bag") == (48, 32)  # the soak warms the planner up on it
    with Writer(tmp_path / "empty", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        odometry = writer.add_connection("/odom", "nav_msgs/msg/Odometry", typestore=package_typestore())
        writer.write(odometry, START_NS, serialize_message(Odometry()))
    assert camera_size(tmp_path / "empty") is None


@pytest.mark.ros
@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3], ids=["mcap", "sqlite3"])
def test_play_publishes_every_message_in_order_with_clock(
    ros_context, tmp_path: Path, storage, monkeypatch
) -> None:
    bag = tmp_path / "drive"
    write_bag(bag, storage)
    probe = Probe(
        ros_context,
        f"bag_probe_{storage.name}",
        {"/cam": Image, "/odom": Odometry, "/plan": PlannedTrajectory, "/clock": Clock},
    )
    player = probe.node  # the player publishes from the probe's node; the probe's executor receives
    due_s: list[float] = []  # the wall times play paces its messages to (how long it took is a benchmark's)
    pace = bag_io._sleep_until
    monkeypatch.setattr(bag_io, "_sleep_until", lambda wall_s: (due_s.append(wall_s), pace(wall_s)))
    counts = play(player, bag, rate=2.0, clock=True, discovery_wait_s=5.0)  # returns once all matched
    assert counts["/cam"] == counts["/odom"] == 10 and counts["/plan"] == 1
    assert max(due_s) - min(due_s) == pytest.approx(0.45 / 2.0)  # 0.45 s of bag time at rate 2
    expected = {"/cam": 10, "/odom": 10, "/plan": 1, "/clock": 19}  # /clock: 5.000 .. 5.450 s at 40 Hz
    assert probe.spin_until(lambda: all(len(probe.received[t]) >= n for t, n in expected.items()), 10)
    assert [image_to_numpy(m)[0, 0, 0] for m in probe.received["/cam"]] == list(range(10))
    assert probe.received["/plan"][0] == SAMPLES["PlannedTrajectory"]
    clocks = [m.clock.sec * 1_000_000_000 + m.clock.nanosec for m in probe.received["/clock"]]
    assert clocks == [START_NS + k * 25_000_000 for k in range(19)]
    probe.close()


@pytest.mark.ros
def test_a_looping_player_keeps_one_set_of_publishers_and_destroys_them(ros_context, tmp_path: Path) -> None:
    """Every pass of a looping bag goes through the same writers; a player that made new ones per pass left
    each earlier writer matched in every subscriber (the soak's planner grew and slowed with them)."""
    bag = tmp_path / "drive"
    write_bag(bag, StoragePlugin.MCAP, frames=3)
    probe = Probe(ros_context, "bag_loop_probe", {"/cam": Image})
    node = probe.node
    before = {p.topic_name for p in node.publishers}
    with BagPlayer(node, bag, rate=10.0, clock=True, discovery_wait_s=5.0) as player:
        during = [p.handle for p in node.publishers]
        counts = [player.play_once()["/cam"] for _ in range(3)]
        assert [p.handle for p in node.publishers] == during  # no publisher made per pass
    assert counts == [3, 3, 3]
    assert {p.topic_name for p in node.publishers} == before  # and none left behind
    assert probe.spin_until(lambda: len(probe.received["/cam"]) >= 9, 10)
    play(node, bag, rate=10.0)  # the one-pass helper cleans up too
    assert {p.topic_name for p in node.publishers} == before
    probe.close()


@pytest.mark.ros
def test_a_topic_recorded_latched_is_replayed_latched(ros_context, tmp_path: Path) -> None:
    """A drive bag's route (the CARLA bridge's latched global plan) reaches a node that subscribes after the
    player published it, as the planner node started late would (it asks for transient local)."""
    route = Path_(header=Header(frame_id="map"))
    route.poses = [PoseStamped(pose=Pose(position=Point(x=float(x)))) for x in range(3)]
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        typestore = package_typestore()
        latched = writer.add_connection(
            "/route", "nav_msgs/msg/Path", typestore=typestore, offered_qos_profiles=[latched_qos()]
        )
        plain = writer.add_connection("/odom", "nav_msgs/msg/Odometry", typestore=typestore)
        writer.write(latched, START_NS, serialize_message(route))
        writer.write(plain, START_NS, serialize_message(Odometry()))
    probe = Probe(ros_context, "latched_probe", {})
    with BagPlayer(probe.node, tmp_path / "bag", discovery_wait_s=0.0) as player:
        assert player.play_once() == {"/route": 1, "/odom": 1}
        received = []
        probe.node.create_subscription(Path_, "/route", received.append, route_qos())
        assert probe.spin_until(lambda: len(received) == 1, 10)
        assert received[0] == route
        (odometry,) = probe.node.get_publishers_info_by_topic("/odom")
        assert odometry.qos_profile.durability == DurabilityPolicy.VOLATILE  # only what was recorded latched
    probe.close()


@pytest.mark.ros
def test_a_latched_topic_is_recorded_latched_though_published_before(ros_context, tmp_path: Path) -> None:
    """The CARLA bridge publishes its route once, latched, usually before recording starts: the recorder
    still gets it, and writes it latched, so that its replay reaches a route model."""
    probe = Probe(ros_context, "latched_recorder", {})
    route = Path_(header=Header(frame_id="map"))
    route.poses = [PoseStamped(pose=Pose(position=Point(x=float(x)))) for x in range(3)]
    probe.node.create_publisher(Path_, "/recorded/route", route_qos()).publish(route)
    counts = record(probe.node, tmp_path / "out", ["/recorded/route"], duration_s=1.0)
    probe.close()
    assert counts["/recorded/route"] == 1
    with Reader(tmp_path / "out") as reader:
        (connection,) = reader.connections
        assert [q.durability.name for q in connection.ext.offered_qos_profiles] == ["TRANSIENT_LOCAL"]
        ((_, _, raw),) = list(reader.messages())
    assert deserialize_message(bytes(raw), Path_) == route


@pytest.mark.ros
def test_record_writes_what_arrives_into_a_readable_mcap_bag(ros_context, tmp_path: Path) -> None:
    publisher_process = subprocess.Popen(
        [sys.executable, "-c", PUBLISHER], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        probe = Probe(ros_context, "recorder", {})
        counts = record(probe.node, tmp_path / "out", ["/recorded/plan"], duration_s=3.0)
        probe.close()
    finally:
        publisher_process.kill()
    assert counts["/recorded/plan"] >= 3
    typestore = package_typestore()
    with Reader(tmp_path / "out") as reader:
        messages = list(reader.messages())
        assert [c.msgtype for c in reader.connections] == ["wamdiff2_ros/msg/PlannedTrajectory"]
    decoded = typestore.deserialize_cdr(messages[0][2], "wamdiff2_ros/msg/PlannedTrajectory")
    assert decoded.raw_text == SAMPLES["PlannedTrajectory"].raw_text
    assert deserialize_message(bytes(messages[-1][2]), PlannedTrajectory) == SAMPLES["PlannedTrajectory"]


PUBLISHER = """
import sys, time, rclpy
sys.path.insert(0, {!r})
from message_samples import SAMPLES
rclpy.init()
node = rclpy.create_node("plan_publisher")
publisher = node.create_publisher(type(SAMPLES["PlannedTrajectory"]), "/recorded/plan", 10)
while True:
    publisher.publish(SAMPLES["PlannedTrajectory"])
    time.sleep(0.1)
""".format(str(Path(__file__).resolve().parents[1] / "support"))


@pytest.mark.ros
@pytest.mark.slow
def test_planner_on_sim_time_plans_frames_replayed_with_clock(ros_context, tmp_path: Path) -> None:
    """Bag stamps are decades old in wall time: only a node following /clock finds the frames fresh."""
    bag = tmp_path / "drive"
    write_bag(bag, StoragePlugin.MCAP, frames=30, period_ns=100_000_000)
    planner = start_node(
        "wamdiff2_ros.nodes.planner",
        "/sim_time",
        {"use_sim_time": True, "decoder.steps": 4, "candidates.count": 1, "input.max_age_s": 0.5},
        {"~/input/image": "/cam", "~/input/odometry": "/odom"},
    )
    probe = Probe(
        ros_context, "sim_time_probe", {"/sim_time/wamdiff2_planner/output/trajectory": PlannedTrajectory}
    )
    try:
        ready = probe.spin_until(lambda: "ready" in node_output(planner), 60)
        assert ready, node_output(planner)
        play(probe.node, bag, clock=True)
        topic = "/sim_time/wamdiff2_planner/output/trajectory"
        assert probe.spin_until(lambda: len(probe.received[topic]) > 0, 20), node_output(planner)
        bag_stamps = {START_NS + i * 100_000_000 for i in range(30)}
        for trajectory in probe.received[topic]:
            stamp = trajectory.header.stamp
            assert stamp.sec * 1_000_000_000 + stamp.nanosec in bag_stamps
    finally:
        probe.close()
        stop_node(planner)
