"""Front-camera frames drawn from a scene snapshot through geometry's pinhole camera.

Sky, grass, road surface, lane markings and vehicles (a body and a glass cabin, shaded boxes) are filled as
polygons with OpenCV in painter's order (far to near). No textures, lighting model or lens effects; the
frame is meant to read as a road scene and to agree pixel-exactly with the pinhole model, not to be pretty.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import NEAR_PLANE_M, Camera, box_corners_3d, clip_polygon_near, map_to_ego
from wamdiff2_ros.sim.scene_types import AgentState, LaneGeometry, Snapshot

MAX_RANGE_M = 150.0  # nothing farther is drawn
MARKING_WIDTH_M = 0.15
STRIPE_ON_M, STRIPE_PERIOD_M = 3.0, 9.0
SUBPIXEL_BITS = 4  # cv2 fixed-point vertices for sub-pixel accurate edges

SKY_TOP_RGB, SKY_HORIZON_RGB = np.array([110, 150, 205]), np.array([200, 215, 230])
GRASS_RGB, ROAD_RGB, MARKING_RGB = (96, 128, 70), (88, 88, 92), (235, 235, 225)
GLASS_RGB = np.array([40, 50, 60])
CAR_COLOURS_RGB = np.array(
    [
        [200, 40, 40],
        [40, 80, 170],
        [230, 230, 230],
        [30, 30, 30],
        [150, 150, 155],
        [40, 130, 70],
        [220, 180, 40],
    ]
)
# Box faces as corner indices of geometry.box_corners_3d (bottom ring 0-3, top ring 4-7), outward normals.
BOX_FACES = ((0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7), (4, 5, 6, 7))
FACE_SHADES = (0.75, 0.95, 0.6, 0.85, 1.1)  # front, left, rear, right, top: fixed sun from the front-left


@dataclass(frozen=True)
class VehicleBox:
    """A vehicle as the camera sees it: amodal box clipped to the image, and how much of it is unoccluded."""

    agent_id: int
    box_px: tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels of the rendered image
    visible_fraction: float
    distance_m: float


@dataclass(frozen=True)
class Frame:
    """One rendered image (H, W, 3) uint8 RGB with the boxes of the vehicles in view."""

    image_rgb: np.ndarray
    boxes: tuple[VehicleBox, ...]


def _fill(image: np.ndarray, polygons_px: list[np.ndarray], colour) -> None:
    if polygons_px:
        scaled = [np.round(p * (1 << SUBPIXEL_BITS)).astype(np.int32) for p in polygons_px]
        # Anti-aliasing only where it means something: colour images, not the id mask.
        line_type = cv2.LINE_AA if image.dtype == np.uint8 else cv2.LINE_8
        cv2.fillPoly(image, scaled, colour, lineType=line_type, shift=SUBPIXEL_BITS)


def _project_polygons(camera: Camera, polygons_ego: np.ndarray) -> list[np.ndarray]:
    """Project ground or box polygons (P, K, 3) in the ego frame, clipping those crossing the near plane."""
    if len(polygons_ego) == 0:
        return []
    optical = camera.ego_to_optical(polygons_ego)  # (P, K, 3)
    in_front = optical[..., 2] >= NEAR_PLANE_M
    whole = in_front.all(axis=1)
    out = list(camera.project_optical(optical[whole]))
    for polygon in optical[in_front.any(axis=1) & ~whole]:
        clipped = clip_polygon_near(polygon, NEAR_PLANE_M)
        if len(clipped) >= 3:
            out.append(camera.project_optical(clipped))
    return out


def _strip_quads(left_ego: np.ndarray, right_ego: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Ground quads (Q, 4, 3) between consecutive samples of two edges, for segments where ``keep`` holds."""
    quads = np.stack([left_ego[:-1], left_ego[1:], right_ego[1:], right_ego[:-1]], axis=1)[keep]
    return np.concatenate([quads, np.zeros((*quads.shape[:2], 1))], axis=2)


def _in_range(points_ego: np.ndarray) -> np.ndarray:
    """Per segment: either end is within drawing range ahead of the camera."""
    near = (points_ego[:, 0] > -2.0) & (np.linalg.norm(points_ego, axis=1) < MAX_RANGE_M)
    return near[:-1] | near[1:]


def _lane_polygons(lanes: tuple[LaneGeometry, ...], ego: AgentState) -> tuple[list, list]:
    """Road-surface quads and marking quads of all lanes, in the ego frame."""
    surface, markings = [], []
    for lane in lanes:
        left_map, right_map = lane.boundaries()
        left, right = map_to_ego(left_map, ego.xy, ego.yaw_rad), map_to_ego(right_map, ego.xy, ego.yaw_rad)
        keep = _in_range(map_to_ego(lane.centre_map, ego.xy, ego.yaw_rad))
        if not keep.any():
            continue
        surface.append(_strip_quads(left, right, keep))
        arc_m = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(lane.centre_map, axis=0), axis=1))])
        for edge, edge_other, line in ((left, right, lane.left_line), (right, left, lane.right_line)):
            if line == "none":
                continue
            inward = edge_other - edge
            inward /= np.linalg.norm(inward, axis=1, keepdims=True)
            painted = keep & ((arc_m[:-1] % STRIPE_PERIOD_M < STRIPE_ON_M) if line == "striped" else True)
            markings.append(_strip_quads(edge, edge + MARKING_WIDTH_M * inward, painted))
    return surface, markings


def _vehicle_parts(agent: AgentState, ego: AgentState) -> list[tuple[np.ndarray, np.ndarray]]:
    """A car as two boxes in the ego frame: (corners (8, 3), body colour) for the body and the cabin."""
    centre = map_to_ego(agent.xy, ego.xy, ego.yaw_rad)
    yaw_rad = agent.yaw_rad - ego.yaw_rad
    colour = CAR_COLOURS_RGB[agent.agent_id % len(CAR_COLOURS_RGB)]
    body_height_m = 0.55 * agent.height_m
    body = box_corners_3d(centre, yaw_rad, agent.length_m, agent.width_m, body_height_m)
    cabin_centre = centre - 0.1 * agent.length_m * np.array([np.cos(yaw_rad), np.sin(yaw_rad)])
    cabin = box_corners_3d(cabin_centre, yaw_rad, 0.55 * agent.length_m, 0.9 * agent.width_m, agent.height_m)
    cabin[:4, 2] = body_height_m
    return [(body, colour), (cabin, colour)]


def _draw_box(
    image, mask, camera: Camera, corners_ego: np.ndarray, colour, mask_id: int, glass: bool
) -> list:
    """Fill the camera-facing faces of one box; returns their projected polygons."""
    lens = np.array([camera.mount.x_m, camera.mount.y_m, camera.mount.height_m])
    centre = corners_ego.mean(axis=0)
    drawn = []
    for face, shade in zip(BOX_FACES, FACE_SHADES, strict=True):
        quad = corners_ego[list(face)]
        face_centre = quad.mean(axis=0)
        if np.dot(face_centre - centre, face_centre - lens) >= 0.0:  # faces away from the lens
            continue
        polygons = _project_polygons(camera, quad[None])
        is_top = face == BOX_FACES[-1]
        base = colour if (is_top or not glass) else GLASS_RGB
        _fill(image, polygons, tuple(int(c) for c in np.clip(base * shade, 0, 255)))
        _fill(mask, polygons, mask_id)
        drawn.extend(polygons)
    return drawn


def _sky_and_grass(camera: Camera) -> np.ndarray:
    k = camera.intrinsics
    horizon_v = int(np.clip(k.cy_px - k.fy_px * np.tan(camera.mount.pitch_down_rad), 0, k.height_px))
    image = np.empty((k.height_px, k.width_px, 3), dtype=np.uint8)
    weights = np.linspace(0.0, 1.0, max(horizon_v, 1))[:, None]
    image[:horizon_v] = (SKY_TOP_RGB * (1 - weights) + SKY_HORIZON_RGB * weights).astype(np.uint8)[:, None, :]
    image[horizon_v:] = GRASS_RGB
    return image


def render_front(camera: Camera, lanes: tuple[LaneGeometry, ...], snapshot: Snapshot) -> Frame:
    """Draw the ego's front camera view of ``snapshot`` and box every vehicle it sees.

    Args:
        camera: intrinsics (image size included) and mount on the ego.
        lanes: the scene's lane geometry (``Scene.lanes``).
        snapshot: the scene state to draw.

    Returns:
        The RGB frame and the boxes of vehicles at least partly in the image, nearest first.
    """
    ego = snapshot.ego
    image = _sky_and_grass(camera)
    k = camera.intrinsics
    mask = np.zeros((k.height_px, k.width_px), dtype=np.uint16)  # agent_id + 1 of the nearest surface
    surface, markings = _lane_polygons(lanes, ego)
    _fill(image, _project_polygons(camera, np.concatenate(surface)) if surface else [], ROAD_RGB)
    _fill(image, _project_polygons(camera, np.concatenate(markings)) if markings else [], MARKING_RGB)
    agents = [(float(np.linalg.norm(map_to_ego(a.xy, ego.xy, ego.yaw_rad))), a) for a in snapshot.agents]
    agents = [
        (d, a) for d, a in agents if d < MAX_RANGE_M and map_to_ego(a.xy, ego.xy, ego.yaw_rad)[0] > -6.0
    ]
    silhouettes = {}
    for distance_m, agent in sorted(agents, key=lambda item: -item[0]):
        polygons = []
        for index, (corners, colour) in enumerate(_vehicle_parts(agent, ego)):
            polygons += _draw_box(image, mask, camera, corners, colour, agent.agent_id + 1, glass=index == 1)
        if polygons:
            silhouettes[agent.agent_id] = (distance_m, np.concatenate(polygons))
    return Frame(image, tuple(sorted(_boxes(silhouettes, mask, camera), key=lambda b: b.distance_m)))


def _boxes(silhouettes: dict, mask: np.ndarray, camera: Camera) -> list[VehicleBox]:
    k = camera.intrinsics
    image_rect = np.array([[0, 0], [k.width_px, 0], [k.width_px, k.height_px], [0, k.height_px]], np.float32)
    visible_px = np.bincount(mask.ravel(), minlength=max(silhouettes, default=0) + 2)
    boxes = []
    for agent_id, (distance_m, points_px) in silhouettes.items():
        hull = cv2.convexHull(points_px.astype(np.float32))
        area_px, clipped = cv2.intersectConvexConvex(hull, image_rect)
        if area_px <= 0.0 or clipped is None:
            continue
        x1, y1 = clipped.reshape(-1, 2).min(axis=0)
        x2, y2 = clipped.reshape(-1, 2).max(axis=0)
        fraction = min(1.0, visible_px[agent_id + 1] / area_px)
        boxes.append(
            VehicleBox(agent_id, (float(x1), float(y1), float(x2), float(y2)), float(fraction), distance_m)
        )
    return boxes


def encode_png(image_rgb: np.ndarray) -> bytes:
    """PNG bytes of an RGB (H, W, 3) uint8 image.

    Raises:
        InputError: the array is not an image OpenCV can encode.
    """
    ok, data = cv2.imencode(".png", cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise InputError(f"could not encode an image of shape {image_rgb.shape} as PNG")
    return data.tobytes()
