"""Recorded drives as rosbag2 MCAP bags written with ``rosbags`` (no ROS installation needed).

Topics follow the CARLA ROS bridge for an ego named ``ego_vehicle`` (docs/REFERENCE.md §9.3) so a bag
replays into a stack configured for CARLA; the driving command has no CARLA equivalent and uses
``/carla/ego_vehicle/driving_command``. Every message of a tick carries the same stamp, the simulation time
plus ``START_TIME_NS``, and ``/clock`` carries it too. Images are ``rgb8``; MCAP chunks are zstd-compressed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.sim.expert import ego_motion
from wamdiff2_ros.sim.scene_types import Snapshot

START_TIME_NS = 1_000_000_000  # a zero stamp means "unset" to tf and many nodes, so time starts at 1 s
GRAVITY_MPS2 = 9.81
DRIVING_COMMAND_TYPE = "wamdiff2_ros/msg/DrivingCommand"
COMMAND_CODES = {"unknown": 0, "left": 1, "straight": 2, "right": 3}  # msg/DrivingCommand.msg constants


@dataclass(frozen=True)
class BagTopics:
    """Topic names and frame ids of a drive bag (CARLA ROS bridge names by default)."""

    image: str = "/carla/ego_vehicle/rgb_front/image"
    camera_info: str = "/carla/ego_vehicle/rgb_front/camera_info"
    odometry: str = "/carla/ego_vehicle/odometry"
    imu: str = "/carla/ego_vehicle/imu"
    command: str = "/carla/ego_vehicle/driving_command"
    route: str = "/carla/ego_vehicle/waypoints"  # the global plan, latched (nav_msgs/Path)
    clock: str = "/clock"
    map_frame: str = "map"
    ego_frame: str = "ego_vehicle"
    camera_frame: str = "ego_vehicle/rgb_front"
    imu_frame: str = "ego_vehicle/imu"


@dataclass(frozen=True)
class DriveTick:
    """What a drive bag records at one tick: the scene state, the rendered frame and the command (with the
    distance to its branch, None where the rule gives none)."""

    snapshot: Snapshot
    image_rgb: np.ndarray
    command: str
    command_distance_m: float | None = None


def find_msg_file(name: str) -> Path:
    """The ``.msg`` file of one of this package's messages, from the source tree or the installed share.

    Raises:
        FileNotFoundError: in neither place.
    """
    package_dir = Path(__file__).resolve().parents[1]
    candidates = [
        package_dir.parent / "msg" / f"{name}.msg",
        Path(sys.prefix) / "share" / "wamdiff2_ros" / "msg" / f"{name}.msg",
    ]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"message definition {name}.msg not found in {[str(p) for p in candidates]}")


def make_typestore():
    """A Kilted typestore with ``wamdiff2_ros/msg/DrivingCommand`` registered from its .msg text."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    typestore = get_typestore(Stores.ROS2_KILTED)
    text = find_msg_file("DrivingCommand").read_text()
    typestore.register(get_types_from_msg(text, DRIVING_COMMAND_TYPE))
    return typestore


def _stamp(typestore, time_ns: int):
    return typestore.types["builtin_interfaces/msg/Time"](
        sec=time_ns // 1_000_000_000, nanosec=time_ns % 1_000_000_000
    )


def _header(typestore, time_ns: int, frame_id: str):
    return typestore.types["std_msgs/msg/Header"](stamp=_stamp(typestore, time_ns), frame_id=frame_id)


def _quaternion_yaw(typestore, yaw_rad: float):
    return typestore.types["geometry_msgs/msg/Quaternion"](
        x=0.0, y=0.0, z=float(np.sin(yaw_rad / 2)), w=float(np.cos(yaw_rad / 2))
    )


def _vector3(typestore, x: float, y: float, z: float):
    return typestore.types["geometry_msgs/msg/Vector3"](x=float(x), y=float(y), z=float(z))


def camera_info_msg(typestore, camera: Camera, header):
    """CameraInfo of an ideal pinhole: plumb_bob with zero distortion, R = identity, P = [K | 0]."""
    k = camera.intrinsics
    matrix = k.matrix
    projection = np.concatenate([matrix, np.zeros((3, 1))], axis=1)
    roi = typestore.types["sensor_msgs/msg/RegionOfInterest"](
        x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
    )
    return typestore.types["sensor_msgs/msg/CameraInfo"](
        header=header,
        height=k.height_px,
        width=k.width_px,
        distortion_model="plumb_bob",
        d=np.zeros(5),
        k=matrix.reshape(-1),
        r=np.eye(3).reshape(-1),
        p=projection.reshape(-1),
        binning_x=0,
        binning_y=0,
        roi=roi,
    )


def _image_msg(typestore, image_rgb: np.ndarray, header):
    height, width = image_rgb.shape[:2]
    return typestore.types["sensor_msgs/msg/Image"](
        header=header,
        height=height,
        width=width,
        encoding="rgb8",
        is_bigendian=0,
        step=width * 3,
        data=np.ascontiguousarray(image_rgb, dtype=np.uint8).reshape(-1),
    )


def _odometry_msg(typestore, snapshot: Snapshot, header, child_frame: str):
    t = typestore.types
    ego = snapshot.ego
    pose = t["geometry_msgs/msg/Pose"](
        position=t["geometry_msgs/msg/Point"](x=ego.x_m, y=ego.y_m, z=0.0),
        orientation=_quaternion_yaw(typestore, ego.yaw_rad),
    )
    # Twist is in the child (ego) frame, as nav_msgs/Odometry specifies: the same velocity as the prompt's.
    velocity, _ = ego_motion(snapshot)
    twist = t["geometry_msgs/msg/Twist"](
        linear=_vector3(typestore, velocity[0], velocity[1], 0.0),
        angular=_vector3(typestore, 0.0, 0.0, snapshot.ego_yaw_rate_radps),
    )
    return t["nav_msgs/msg/Odometry"](
        header=header,
        child_frame_id=child_frame,
        pose=t["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=t["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)),
    )


def _imu_msg(typestore, snapshot: Snapshot, header):
    _, accel = ego_motion(snapshot)
    # An accelerometer measures specific force: gravity reads as +9.81 m/s^2 upwards when level.
    return typestore.types["sensor_msgs/msg/Imu"](
        header=header,
        orientation=_quaternion_yaw(typestore, snapshot.ego.yaw_rad),
        orientation_covariance=np.zeros(9),
        angular_velocity=_vector3(typestore, 0.0, 0.0, snapshot.ego_yaw_rate_radps),
        angular_velocity_covariance=np.zeros(9),
        linear_acceleration=_vector3(typestore, accel[0], accel[1], GRAVITY_MPS2),
        linear_acceleration_covariance=np.zeros(9),
    )


def latched_qos():
    """The offered QoS of a latched topic (reliable, transient local, the newest message), as rosbag2
    records it: a player that honours it lets a late subscriber still receive the message."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    default = QosTime(sec=0, nsec=0)  # rmw's "default": no deadline, lifespan or lease
    return Qos(
        QosHistory.KEEP_LAST, 1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL,
        default, default, QosLiveliness.AUTOMATIC, default, False,
    )  # fmt: skip


def _route_msg(typestore, header, route_map: np.ndarray):
    t = typestore.types
    poses = [
        t["geometry_msgs/msg/PoseStamped"](
            header=header,
            pose=t["geometry_msgs/msg/Pose"](
                position=t["geometry_msgs/msg/Point"](x=float(x), y=float(y), z=0.0),
                orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
            ),
        )
        for x, y in route_map
    ]
    return t["nav_msgs/msg/Path"](header=header, poses=poses)


def write_drive_bag(
    path: Path,
    camera: Camera,
    ticks: Iterable[DriveTick],
    topics: BagTopics = BagTopics(),
    route_map: np.ndarray | None = None,
) -> int:
    """Write a drive as a rosbag2 (format 9) MCAP bag at ``path`` (a new directory).

    Args:
        path: bag directory to create; must not exist.
        camera: the camera whose intrinsics go into CameraInfo (must match the images' size).
        ticks: the drive, in time order.
        topics: topic names and frame ids.
        route_map: the ego's route (M, 2) in the map frame, written once with the first tick on
            ``topics.route``, latched as the CARLA bridge publishes its global plan; None: no route topic.

    Returns:
        The number of ticks written.

    Raises:
        InputError: an image whose size differs from the camera's, or an unknown command.
        rosbags.rosbag2.WriterError: the bag exists already or cannot be written.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    typestore = make_typestore()
    k = camera.intrinsics
    count = 0
    writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with writer:
        types = {
            topics.image: "sensor_msgs/msg/Image",
            topics.camera_info: "sensor_msgs/msg/CameraInfo",
            topics.odometry: "nav_msgs/msg/Odometry",
            topics.imu: "sensor_msgs/msg/Imu",
            topics.command: DRIVING_COMMAND_TYPE,
            topics.clock: "rosgraph_msgs/msg/Clock",
        }
        connections = {
            topic: writer.add_connection(topic, msgtype, typestore=typestore)
            for topic, msgtype in types.items()
        }
        if route_map is not None:
            types[topics.route] = "nav_msgs/msg/Path"
            connections[topics.route] = writer.add_connection(
                topics.route, types[topics.route], typestore=typestore, offered_qos_profiles=[latched_qos()]
            )
        for tick in ticks:
            if tick.image_rgb.shape != (k.height_px, k.width_px, 3):
                raise InputError(
                    f"image shape {tick.image_rgb.shape} does not match the camera {k.width_px}x{k.height_px}"
                )
            if tick.command not in COMMAND_CODES:
                raise InputError(f"unknown driving command {tick.command!r}")
            time_ns = START_TIME_NS + round(tick.snapshot.time_s * 1e9)
            camera_header = _header(typestore, time_ns, topics.camera_frame)
            messages = {
                topics.clock: typestore.types["rosgraph_msgs/msg/Clock"](clock=_stamp(typestore, time_ns)),
                topics.image: _image_msg(typestore, tick.image_rgb, camera_header),
                topics.camera_info: camera_info_msg(typestore, camera, camera_header),
                topics.odometry: _odometry_msg(
                    typestore, tick.snapshot, _header(typestore, time_ns, topics.map_frame), topics.ego_frame
                ),
                topics.imu: _imu_msg(typestore, tick.snapshot, _header(typestore, time_ns, topics.imu_frame)),
                topics.command: typestore.types[DRIVING_COMMAND_TYPE](
                    header=_header(typestore, time_ns, ""),
                    command=COMMAND_CODES[tick.command],
                    has_distance=tick.command_distance_m is not None,
                    distance_m=0.0 if tick.command_distance_m is None else tick.command_distance_m,
                ),
            }
            if route_map is not None and count == 0:  # first: a replay's first frame finds the route there
                route = _route_msg(typestore, _header(typestore, time_ns, topics.map_frame), route_map)
                messages = {topics.route: route, **messages}
            for topic, message in messages.items():
                writer.write(connections[topic], time_ns, typestore.serialize_cdr(message, types[topic]))
            count += 1
    return count
