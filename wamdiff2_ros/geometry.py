"""Pinhole camera and the map / ego / camera frame transforms, numpy only.

Frames: map (right-handed, z up), ego (x forward, y left, z up, origin on the ground under the vehicle centre)
and camera optical (x right, y down, z forward, as ROS ``*_optical`` frames and CameraInfo use). Lens
distortion is out of scope: every camera here is an ideal pinhole (plumb_bob coefficients all zero).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from wamdiff2_ros.errors import InputError


@dataclass(frozen=True)
class CameraIntrinsics:
    """Ideal pinhole intrinsics in pixels; the principal point is measured from the top-left pixel corner."""

    width_px: int
    height_px: int
    fx_px: float
    fy_px: float
    cx_px: float
    cy_px: float

    @classmethod
    def from_fov(cls, width_px: int, height_px: int, horizontal_fov_deg: float) -> CameraIntrinsics:
        """Square pixels, centred principal point, focal length from the horizontal field of view.

        Raises:
            InputError: non-positive size or a field of view outside (0, 180) degrees.
        """
        if width_px <= 0 or height_px <= 0 or not 0.0 < horizontal_fov_deg < 180.0:
            raise InputError(f"bad camera: {width_px}x{height_px} px, fov {horizontal_fov_deg} deg")
        f_px = width_px / (2.0 * np.tan(np.radians(horizontal_fov_deg) / 2.0))
        return cls(width_px, height_px, f_px, f_px, width_px / 2.0, height_px / 2.0)

    def scaled_to_width(self, width_px: int) -> CameraIntrinsics:
        """The same camera resampled to ``width_px`` wide, height rounded to keep the aspect ratio."""
        scale = width_px / self.width_px
        return CameraIntrinsics(
            width_px,
            round(self.height_px * scale),
            self.fx_px * scale,
            self.fy_px * scale,
            self.cx_px * scale,
            self.cy_px * scale,
        )

    @property
    def matrix(self) -> np.ndarray:
        """The 3x3 camera matrix K (CameraInfo ``k``)."""
        return np.array([[self.fx_px, 0.0, self.cx_px], [0.0, self.fy_px, self.cy_px], [0.0, 0.0, 1.0]])


NEAR_PLANE_M = 0.5  # points closer to the lens than this are clipped before projection

# NAVSIM CAM_F0 is 1920x1080 with a focal length near 1546 px (about 64 degrees horizontal).
NAVSIM_FRONT_INTRINSICS = CameraIntrinsics(1920, 1080, 1546.0, 1546.0, 960.0, 540.0)


@dataclass(frozen=True)
class CameraMount:
    """Where the camera sits on the ego vehicle: position in the ego frame and downward pitch."""

    x_m: float = 1.5
    y_m: float = 0.0
    height_m: float = 1.6
    pitch_down_rad: float = 0.03


@dataclass(frozen=True)
class Camera:
    """A pinhole camera mounted on the ego vehicle."""

    intrinsics: CameraIntrinsics = NAVSIM_FRONT_INTRINSICS
    mount: CameraMount = CameraMount()

    def scaled_to_width(self, width_px: int) -> Camera:
        """The same camera at a different image width (same field of view and mount)."""
        return replace(self, intrinsics=self.intrinsics.scaled_to_width(width_px))

    def _rotation_ego_to_optical(self) -> np.ndarray:
        # Rows are the optical axes (right, down, forward) written in the ego frame, pitched down about y.
        c, s = np.cos(self.mount.pitch_down_rad), np.sin(self.mount.pitch_down_rad)
        forward = np.array([c, 0.0, -s])
        down = np.array([-s, 0.0, -c])
        right = np.array([0.0, -1.0, 0.0])
        return np.stack([right, down, forward])

    def ego_to_optical(self, points_ego: np.ndarray) -> np.ndarray:
        """Ego-frame points (..., 3) in metres to camera optical frame points (..., 3)."""
        origin = np.array([self.mount.x_m, self.mount.y_m, self.mount.height_m])
        return (np.asarray(points_ego, dtype=np.float64) - origin) @ self._rotation_ego_to_optical().T

    def optical_to_ego(self, points_optical: np.ndarray) -> np.ndarray:
        """Inverse of ``ego_to_optical``."""
        origin = np.array([self.mount.x_m, self.mount.y_m, self.mount.height_m])
        return np.asarray(points_optical, dtype=np.float64) @ self._rotation_ego_to_optical() + origin

    def project_optical(self, points_optical: np.ndarray) -> np.ndarray:
        """Optical-frame points (..., 3) with z > 0 to pixel coordinates (..., 2).

        Raises:
            InputError: a point is not in front of the camera (z <= 0); clip first (``clip_polygon_near``).
        """
        points_optical = np.asarray(points_optical, dtype=np.float64)
        z_m = points_optical[..., 2]
        if np.any(z_m <= 0.0):
            raise InputError("cannot project points behind the camera; clip them at the near plane first")
        k = self.intrinsics
        u_px = k.fx_px * points_optical[..., 0] / z_m + k.cx_px
        v_px = k.fy_px * points_optical[..., 1] / z_m + k.cy_px
        return np.stack([u_px, v_px], axis=-1)

    def project_ego(self, points_ego: np.ndarray) -> np.ndarray:
        """Ego-frame points in front of the camera to pixels (..., 2)."""
        return self.project_optical(self.ego_to_optical(points_ego))

    def pixel_to_ground(self, pixels_uv: np.ndarray) -> np.ndarray:
        """Intersect the rays through pixels (N, 2) with the flat ground z = 0; ego-frame (N, 2) points.

        Rays that never reach the ground ahead (at or above the horizon) give NaN rows.
        """
        pixels_uv = np.atleast_2d(np.asarray(pixels_uv, dtype=np.float64))
        k = self.intrinsics
        rays_optical = np.stack(
            [
                (pixels_uv[:, 0] - k.cx_px) / k.fx_px,
                (pixels_uv[:, 1] - k.cy_px) / k.fy_px,
                np.ones(len(pixels_uv)),
            ],
            axis=-1,
        )
        rays_ego = rays_optical @ self._rotation_ego_to_optical()  # (N, 3) directions in the ego frame
        with np.errstate(divide="ignore", invalid="ignore"):
            t = -self.mount.height_m / rays_ego[:, 2]
        t = np.where(t > 0.0, t, np.nan)
        origin_xy = np.array([self.mount.x_m, self.mount.y_m])
        return origin_xy + t[:, None] * rays_ego[:, :2]


def rotation_2d(yaw_rad: float) -> np.ndarray:
    """The 2x2 rotation matrix of ``yaw_rad`` (counter-clockwise)."""
    c, s = np.cos(yaw_rad), np.sin(yaw_rad)
    return np.array([[c, -s], [s, c]])


def map_to_ego(points_map_xy: np.ndarray, ego_xy: np.ndarray, ego_yaw_rad: float) -> np.ndarray:
    """Map-frame points (..., 2) into the ego frame of a vehicle at ``ego_xy`` with ``ego_yaw_rad``."""
    return (np.asarray(points_map_xy, dtype=np.float64) - ego_xy) @ rotation_2d(ego_yaw_rad)


def ego_to_map(points_ego_xy: np.ndarray, ego_xy: np.ndarray, ego_yaw_rad: float) -> np.ndarray:
    """Inverse of ``map_to_ego``."""
    return np.asarray(points_ego_xy, dtype=np.float64) @ rotation_2d(ego_yaw_rad).T + ego_xy


def wrap_angle(angle_rad: np.ndarray | float) -> np.ndarray | float:
    """Angles wrapped to [-pi, pi)."""
    return (np.asarray(angle_rad) + np.pi) % (2.0 * np.pi) - np.pi


def box_corners_2d(center_xy: np.ndarray, yaw_rad: np.ndarray, length_m: float, width_m: float) -> np.ndarray:
    """Footprint corners of oriented boxes, (..., 4, 2), counter-clockwise from front-left.

    Args:
        center_xy: box centres (..., 2).
        yaw_rad: headings (...).
        length_m: box length along its heading.
        width_m: box width.
    """
    center_xy = np.asarray(center_xy, dtype=np.float64)
    yaw_rad = np.asarray(yaw_rad, dtype=np.float64)
    half = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.float64) * [length_m / 2, width_m / 2]
    c, s = np.cos(yaw_rad)[..., None], np.sin(yaw_rad)[..., None]
    x = half[:, 0] * c - half[:, 1] * s
    y = half[:, 0] * s + half[:, 1] * c
    return center_xy[..., None, :] + np.stack([x, y], axis=-1)


def box_corners_3d(
    center_xy: np.ndarray, yaw_rad: float, length_m: float, width_m: float, height_m: float
) -> np.ndarray:
    """The 8 corners (8, 3) of a box standing on z = 0: bottom ring, then top ring, each as the footprint."""
    footprint = box_corners_2d(center_xy, yaw_rad, length_m, width_m)
    bottom = np.concatenate([footprint, np.zeros((4, 1))], axis=1)
    top = np.concatenate([footprint, np.full((4, 1), height_m)], axis=1)
    return np.concatenate([bottom, top])


def clip_polygon_near(polygon_optical: np.ndarray, near_m: float) -> np.ndarray:
    """Clip a convex or simple polygon (N, 3) in the optical frame to z >= near_m (Sutherland-Hodgman).

    Returns:
        The clipped polygon (M, 3); M may be 0 when it lies wholly behind the plane.
    """
    out = []
    n = len(polygon_optical)
    for i in range(n):
        cur, nxt = polygon_optical[i], polygon_optical[(i + 1) % n]
        cur_in, nxt_in = cur[2] >= near_m, nxt[2] >= near_m
        if cur_in:
            out.append(cur)
        if cur_in != nxt_in:
            t = (near_m - cur[2]) / (nxt[2] - cur[2])
            out.append(cur + t * (nxt - cur))
    return np.array(out).reshape(-1, 3)
