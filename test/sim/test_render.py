"""Frames agree with the pinhole model: a known layout puts known points at the predicted pixels."""

import cv2
import numpy as np
import pytest

from wamdiff2_ros.geometry import Camera, CameraIntrinsics, CameraMount
from wamdiff2_ros.sim.render import CAR_COLOURS_RGB, ROAD_RGB, encode_png, render_front
from wamdiff2_ros.sim.scene_types import AgentState, LaneGeometry, Snapshot

CAMERA = Camera(CameraIntrinsics(320, 180, 250.0, 250.0, 160.0, 90.0), CameraMount(1.5, 0.0, 1.6, 0.0))
X_M = np.arange(-20.0, 200.0, 2.0)
STRAIGHT_LANE = (
    LaneGeometry(
        np.stack([X_M, np.full(110, 2.0)], 1),
        np.stack([X_M, np.full(110, -2.0)], 1),
        "continuous",
        "continuous",
    ),
)


def _snapshot(*agents: AgentState) -> Snapshot:
    ego = AgentState(0, 0.0, 0.0, 0.0, 10.0, 5.0, 2.0)
    return Snapshot(
        time_s=0.0,
        ego=ego,
        ego_accel_mps2=0.0,
        ego_yaw_rate_radps=0.0,
        ego_slip_rad=0.0,
        agents=agents,
        ego_crashed=False,
        ego_on_road=True,
    )


def _pixel(point_ego):
    return CAMERA.project_ego(np.array(point_ego, dtype=float))


def test_frame_has_camera_size_sky_above_road_below():
    image = render_front(CAMERA, STRAIGHT_LANE, _snapshot()).image_rgb
    assert image.shape == (180, 320, 3) and image.dtype == np.uint8
    assert image[5, 160, 2] > image[5, 160, 0]  # blue sky
    u, v = _pixel([11.5, 0.0, 0.0]).round().astype(int)  # road 10 m ahead of the lens
    np.testing.assert_array_equal(image[v, u], ROAD_RGB)


def test_car_ahead_is_boxed_where_the_pinhole_model_puts_its_rear():
    car = AgentState(1, 21.5, 0.0, 0.0, 0.0, 5.0, 2.0)  # rear face at 19 m: 17.5 m ahead of the lens
    frame = render_front(CAMERA, STRAIGHT_LANE, _snapshot(car))
    (box,) = frame.boxes
    left_bottom = _pixel([19.0, 1.0, 0.0])
    right_bottom = _pixel([19.0, -1.0, 0.0])
    assert box.box_px[0] == pytest.approx(left_bottom[0], abs=0.01)
    assert box.box_px[2] == pytest.approx(right_bottom[0], abs=0.01)
    assert box.box_px[3] == pytest.approx(left_bottom[1], abs=0.01)
    assert box.visible_fraction > 0.95 and box.distance_m == pytest.approx(21.5)
    u, v = _pixel([19.0, 0.0, 0.4]).round().astype(int)  # middle of the body's rear face
    shade = frame.image_rgb[v, u].astype(float) / CAR_COLOURS_RGB[1]
    assert np.allclose(shade, shade[0], atol=0.02)  # the car's colour, darkened by one face shade


def test_occluded_car_has_low_visible_fraction():
    near = AgentState(1, 15.0, 0.0, 0.0, 0.0, 5.0, 2.0)
    far = AgentState(2, 30.0, 0.0, 0.0, 0.0, 5.0, 2.0)
    boxes = {b.agent_id: b for b in render_front(CAMERA, STRAIGHT_LANE, _snapshot(near, far)).boxes}
    assert boxes[1].visible_fraction > 0.95 and boxes[2].visible_fraction < 0.1


def test_cars_behind_the_ego_are_not_boxed():
    behind = AgentState(1, -20.0, 0.0, 0.0, 0.0, 5.0, 2.0)
    assert render_front(CAMERA, STRAIGHT_LANE, _snapshot(behind)).boxes == ()


def test_png_encoding_is_lossless_rgb():
    image = render_front(CAMERA, STRAIGHT_LANE, _snapshot()).image_rgb
    decoded = cv2.cvtColor(
        cv2.imdecode(np.frombuffer(encode_png(image), np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB
    )
    np.testing.assert_array_equal(decoded, image)
