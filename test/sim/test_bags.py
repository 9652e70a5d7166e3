"""A drive bag reads back with rosbags: every topic once per tick, stamps, frames, encodings and values."""

import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Reader

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.sim.bags import START_TIME_NS, BagTopics, DriveTick, make_typestore, write_drive_bag
from wamdiff2_ros.sim.expert import navigation
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scenes import make_scene

CAMERA = Camera().scaled_to_width(160)
TICKS = 12


@pytest.fixture(scope="module")
def drive(tmp_path_factory):
    scene = make_scene(4, "intersection")
    ticks = []
    for _ in range(TICKS):
        snapshot = scene.snapshot()
        image = render_front(CAMERA, scene.lanes, snapshot).image_rgb
        told = navigation(scene, snapshot.ego.xy, "branch_distance")
        ticks.append(DriveTick(snapshot, image, told.command, told.distance_m))
        scene.step()
    path = tmp_path_factory.mktemp("bags") / "drive"
    assert write_drive_bag(path, CAMERA, ticks, route_map=scene.route_map) == TICKS
    typestore = make_typestore()
    with Reader(path) as reader:
        messages = [
            (conn.topic, stamp, typestore.deserialize_cdr(raw, conn.msgtype))
            for conn, stamp, raw in reader.messages()
        ]
    storage = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"][
        "storage_identifier"
    ]
    return ticks, messages, storage, scene.route_map, path


def _topic(messages, topic):
    return [(stamp, msg) for name, stamp, msg in messages if name == topic]


def test_bag_is_mcap_with_every_topic_once_per_tick(drive):
    _, messages, storage, *_ = drive
    assert storage == "mcap"
    topics = BagTopics()
    for topic in (
        topics.image,
        topics.camera_info,
        topics.odometry,
        topics.imu,
        topics.command,
        topics.clock,
    ):
        assert len(_topic(messages, topic)) == TICKS, topic


def test_stamps_are_sim_time_and_headers_match_the_bag_time(drive):
    ticks, messages, *_ = drive
    expected_ns = [START_TIME_NS + round(t.snapshot.time_s * 1e9) for t in ticks]
    for stamp_ns, msg in _topic(messages, BagTopics().image):
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == stamp_ns
    assert [s for s, _ in _topic(messages, BagTopics().image)] == expected_ns
    assert [m.clock.sec * 10**9 + m.clock.nanosec for _, m in _topic(messages, "/clock")] == expected_ns
    assert np.diff(expected_ns).tolist() == [100_000_000] * (TICKS - 1)  # 10 Hz


def test_image_camera_info_odometry_imu_and_command_contents(drive):
    ticks, messages, *_ = drive
    topics = BagTopics()
    _, image = _topic(messages, topics.image)[3]
    assert (image.encoding, image.width, image.height, image.step) == ("rgb8", 160, 90, 480)
    assert image.header.frame_id == "ego_vehicle/rgb_front"
    np.testing.assert_array_equal(image.data.reshape(90, 160, 3), ticks[3].image_rgb)
    _, info = _topic(messages, topics.camera_info)[3]
    np.testing.assert_allclose(info.k.reshape(3, 3), CAMERA.intrinsics.matrix)
    assert info.header.frame_id == image.header.frame_id and info.distortion_model == "plumb_bob"
    _, odom = _topic(messages, topics.odometry)[3]
    ego = ticks[3].snapshot.ego
    assert (odom.header.frame_id, odom.child_frame_id) == ("map", "ego_vehicle")
    assert (odom.pose.pose.position.x, odom.pose.pose.position.y) == pytest.approx((ego.x_m, ego.y_m))
    assert 2 * np.arctan2(odom.pose.pose.orientation.z, odom.pose.pose.orientation.w) == pytest.approx(
        ego.yaw_rad
    )
    assert np.hypot(odom.twist.twist.linear.x, odom.twist.twist.linear.y) == pytest.approx(ego.speed_mps)
    _, imu = _topic(messages, topics.imu)[3]
    assert imu.linear_acceleration.z == pytest.approx(9.81) and imu.header.frame_id == "ego_vehicle/imu"
    codes = {"left": 1, "straight": 2, "right": 3}
    commands = [m for _, m in _topic(messages, topics.command)]
    assert [m.command for m in commands] == [codes[t.command] for t in ticks]
    assert any(t.command_distance_m is not None for t in ticks)  # the drive approaches its branch
    for message, tick in zip(commands, ticks, strict=True):
        assert message.has_distance == (tick.command_distance_m is not None)
        assert message.distance_m == pytest.approx(tick.command_distance_m or 0.0, abs=1e-4)


def test_image_of_the_wrong_size_is_refused(tmp_path, drive):
    ticks, *_ = drive
    wrong = DriveTick(ticks[0].snapshot, np.zeros((10, 10, 3), np.uint8), "left")
    with pytest.raises(InputError, match="does not match the camera"):
        write_drive_bag(tmp_path / "bad", CAMERA, [wrong])


def test_the_route_is_written_once_latched_in_the_map_frame(drive):
    ticks, messages, _, route_map, path = drive
    (stamp_ns, route), *later = _topic(messages, BagTopics().route)
    assert not later and stamp_ns == START_TIME_NS + round(ticks[0].snapshot.time_s * 1e9)
    assert messages[0][0] == BagTopics().route  # before the first frame: a replay plans it with the route
    assert route.header.frame_id == "map" == _topic(messages, BagTopics().odometry)[0][1].header.frame_id
    points = [(pose.pose.position.x, pose.pose.position.y) for pose in route.poses]
    np.testing.assert_allclose(points, route_map)
    with Reader(path) as reader:
        (connection,) = [c for c in reader.connections if c.topic == BagTopics().route]
        assert [q.durability.name for q in connection.ext.offered_qos_profiles] == ["TRANSIENT_LOCAL"]
