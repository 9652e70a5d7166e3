"""Every custom message crosses processes intact over real Fast DDS; so does a 1920x1080 camera frame."""

from __future__ import annotations

import numpy as np
import pytest
from message_samples import HEADER, SAMPLES
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from wamdiff2_ros.nodes.convert.images import image_to_numpy, numpy_to_image


@pytest.fixture(scope="module")
def received_custom(dds_exchange):
    """One peer process receives all custom types at once (one discovery round for the module)."""
    return dds_exchange({f"/test_custom/{name}": msg for name, msg in SAMPLES.items()})


@pytest.mark.ros
@pytest.mark.parametrize("name", list(SAMPLES))
def test_custom_message_crosses_processes_intact(received_custom, name: str) -> None:
    msg = SAMPLES[name]
    received = deserialize_message(received_custom.raw[f"/test_custom/{name}"], type(msg))
    assert received == msg


@pytest.mark.ros
@pytest.mark.parametrize("qos", ["reliable", "sensor"])
def test_1080p_bgr8_frame_crosses_processes(dds_exchange, ros_namespace: str, qos: str) -> None:
    frame = np.random.default_rng(7).integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)
    header = Header(stamp=HEADER.stamp, frame_id="camera_front_optical")
    received = dds_exchange({f"{ros_namespace}/image": numpy_to_image(frame, "bgr8", header)}, qos=qos)
    msg = deserialize_message(received.raw[f"{ros_namespace}/image"], Image)
    assert msg.header == header
    np.testing.assert_array_equal(image_to_numpy(msg), frame)
