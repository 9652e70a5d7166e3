"""Pinhole projection and frame transforms against hand-computed values."""

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import (
    Camera,
    CameraIntrinsics,
    CameraMount,
    box_corners_2d,
    clip_polygon_near,
    ego_to_map,
    map_to_ego,
)

LEVEL_CAMERA = Camera(CameraIntrinsics(640, 360, 500.0, 500.0, 320.0, 180.0), CameraMount(1.5, 0.0, 1.6, 0.0))


def test_point_on_optical_axis_projects_to_principal_point():
    uv = LEVEL_CAMERA.project_ego(np.array([11.5, 0.0, 1.6]))
    np.testing.assert_allclose(uv, [320.0, 180.0])


@pytest.mark.parametrize(
    ("point_ego", "expected_uv"),
    [
        ((11.5, 1.0, 1.6), (320.0 - 500.0 * 1.0 / 10.0, 180.0)),  # 1 m left of the axis at 10 m
        ((21.5, 0.0, 0.0), (320.0, 180.0 + 500.0 * 1.6 / 20.0)),  # ground point 20 m ahead of the lens
        ((6.5, -2.0, 2.6), (320.0 + 500.0 * 2.0 / 5.0, 180.0 - 500.0 * 1.0 / 5.0)),
    ],
    ids=["left", "ground", "right-up"],
)
def test_projection_matches_pinhole_formula(point_ego, expected_uv):
    np.testing.assert_allclose(LEVEL_CAMERA.project_ego(np.array(point_ego)), expected_uv, atol=1e-9)


def test_pixel_to_ground_inverts_projection_with_pitch():
    camera = Camera().scaled_to_width(640)
    rng = np.random.default_rng(0)
    ground_ego = np.stack([rng.uniform(5, 80, 50), rng.uniform(-10, 10, 50), np.zeros(50)], axis=1)
    back = camera.pixel_to_ground(camera.project_ego(ground_ego))
    np.testing.assert_allclose(back, ground_ego[:, :2], atol=1e-6)


def test_pixel_above_horizon_has_no_ground_point():
    assert np.isnan(LEVEL_CAMERA.pixel_to_ground(np.array([[320.0, 100.0]]))).all()


def test_projecting_a_point_behind_the_camera_is_refused():
    with pytest.raises(InputError, match="behind the camera"):
        LEVEL_CAMERA.project_ego(np.array([0.0, 0.0, 1.6]))


def test_fov_90_degrees_gives_focal_half_width():
    k = CameraIntrinsics.from_fov(800, 600, 90.0)
    assert k.fx_px == pytest.approx(400.0) and (k.cx_px, k.cy_px) == (400.0, 300.0)


def test_scaled_camera_scales_pixels():
    point = np.array([20.0, 2.0, 0.5])
    full = Camera()
    half = full.scaled_to_width(960)
    np.testing.assert_allclose(half.project_ego(point), full.project_ego(point) / 2.0, atol=1e-9)
    assert half.intrinsics.height_px == 540


def test_map_to_ego_known_case_and_round_trip():
    ego_xy, yaw = np.array([10.0, 5.0]), np.pi / 2  # facing north
    np.testing.assert_allclose(map_to_ego(np.array([10.0, 8.0]), ego_xy, yaw), [3.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(
        map_to_ego(np.array([7.0, 5.0]), ego_xy, yaw), [0.0, 3.0], atol=1e-12
    )  # west = left
    points = np.random.default_rng(1).normal(size=(10, 2)) * 30
    np.testing.assert_allclose(ego_to_map(map_to_ego(points, ego_xy, yaw), ego_xy, yaw), points, atol=1e-9)


def test_box_corners_are_counter_clockwise_from_front_left():
    corners = box_corners_2d(np.zeros(2), 0.0, 4.0, 2.0)
    np.testing.assert_allclose(corners, [[2, 1], [-2, 1], [-2, -1], [2, -1]])


def test_near_clipping_keeps_only_the_front_part():
    square = np.array([[-1.0, 0.0, -2.0], [1.0, 0.0, -2.0], [1.0, 0.0, 4.0], [-1.0, 0.0, 4.0]])
    clipped = clip_polygon_near(square, 0.5)
    assert clipped[:, 2].min() == pytest.approx(0.5) and len(clipped) == 4
    assert len(clip_polygon_near(square - [0, 0, 10], 0.5)) == 0
