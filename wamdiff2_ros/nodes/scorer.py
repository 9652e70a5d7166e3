"""ScorerNode: scores the planner's K candidates PDM-style and publishes the scored set and the selection.

Scoring itself is ``eval.scoring`` (the same sub-scores and composition as the offline metrics); this node
gathers its inputs: the newest detections (placed on the ground through the camera model of the newest
camera_info, or a field-of-view guess), and the ego speed from odometry.

Topics (private, remapped by the launch file):
  in:  ~/input/candidates (CandidateTrajectories), ~/input/detections (Detections2D),
       ~/input/camera_info (sensor_msgs/CameraInfo), ~/input/odometry (nav_msgs/Odometry)
  out: ~/output/scored (CandidateTrajectories with scores and selected_index; the scorer's own stop
       appended when every candidate hits a detected vehicle), ~/output/trajectory (the selected
       PlannedTrajectory), ~/output/markers (MarkerArray), /diagnostics
"""

from __future__ import annotations

import sys
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo
from visualization_msgs.msg import MarkerArray

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.metrics import Agents
from wamdiff2_ros.eval.scoring import ScorerSettings, agents_from_boxes, score_candidates
from wamdiff2_ros.geometry import Camera, CameraIntrinsics, CameraMount
from wamdiff2_ros.msg import CandidateTrajectories, Detections2D, PlannedTrajectory, TrajectoryScore
from wamdiff2_ros.nodes import qos
from wamdiff2_ros.nodes.convert.odometry import ego_velocity_mps, stamp_ns
from wamdiff2_ros.nodes.convert.trajectories import planned_trajectory, waypoints_of
from wamdiff2_ros.nodes.diagnostics import NodeHealth, steady_clock
from wamdiff2_ros.nodes.entry import spin_node
from wamdiff2_ros.nodes.markers import trajectory_markers
from wamdiff2_ros.nodes.params import SCORER_PARAMS, declare


def intrinsics_from_camera_info(info: CameraInfo) -> CameraIntrinsics:
    """Pinhole intrinsics from a CameraInfo's K (distortion is ignored: boxes are coarse anyway).

    Raises:
        InputError: zero size or a non-positive focal length.
    """
    fx, fy, cx, cy = info.k[0], info.k[4], info.k[2], info.k[5]
    if info.width == 0 or info.height == 0 or not (fx > 0 and fy > 0):
        raise InputError(f"unusable camera_info: {info.width}x{info.height}, fx {fx}, fy {fy}")
    return CameraIntrinsics(int(info.width), int(info.height), float(fx), float(fy), float(cx), float(cy))


class ScorerNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("wamdiff2_scorer", **kwargs)
        p = self.params = declare(self, SCORER_PARAMS)
        self.settings = ScorerSettings(
            lateral_bound_m=p["corridor.lateral_bound_m"],
            corridor_length_m=p["corridor.length_m"],
            agent_length_m=p["agents.length_m"],
            agent_width_m=p["agents.width_m"],
            selection=p["selection"],
            stop_when_blocked=p["stop.when_blocked"],
            stop_margin_m=p["stop.margin_m"],
            max_decel_mps2=p["stop.max_decel_mps2"],
            detections_max_age_s=p["detections.max_age_s"],
        )
        self.mount = CameraMount(
            x_m=p["camera.mount_x_m"],
            y_m=p["camera.mount_y_m"],
            height_m=p["camera.height_m"],
            pitch_down_rad=p["camera.pitch_down_rad"],
        )
        self.health = NodeHealth(self.get_fully_qualified_name())
        self.health.set_model_state("ready")  # the scorer has no model to load
        self._intrinsics: CameraIntrinsics | None = None
        self._detections: Detections2D | None = None
        self._velocity_mps = (0.0, 0.0)

        self.pub_scored = self.create_publisher(CandidateTrajectories, "~/output/scored", qos.RELIABLE)
        self.pub_trajectory = self.create_publisher(PlannedTrajectory, "~/output/trajectory", qos.RELIABLE)
        self.pub_markers = self.create_publisher(MarkerArray, "~/output/markers", qos.RELIABLE)
        self.pub_diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", qos.RELIABLE)
        self.create_subscription(
            CandidateTrajectories, "~/input/candidates", self._on_candidates, qos.RELIABLE
        )
        self.create_subscription(Detections2D, "~/input/detections", self._on_detections, qos.RELIABLE)
        self.create_subscription(
            CameraInfo, "~/input/camera_info", self._on_camera_info, qos.camera("reliable", 1)
        )
        self.create_subscription(Odometry, "~/input/odometry", self._on_odometry, qos.RELIABLE)
        self.create_timer(p["diagnostics.period_s"], self._publish_diagnostics, clock=steady_clock())

    def _on_camera_info(self, msg: CameraInfo) -> None:
        try:
            self._intrinsics = intrinsics_from_camera_info(msg)
        except InputError as error:
            self.health.problem("camera_info", str(error))

    def _on_detections(self, msg: Detections2D) -> None:
        if msg.image_width == 0 or msg.image_height == 0:
            self.health.problem("detections", "detections without an image size are ignored")
            return
        self._detections = msg

    def _on_odometry(self, msg: Odometry) -> None:
        try:
            self._velocity_mps = ego_velocity_mps(msg)
        except InputError as error:
            self.health.problem("state", str(error))

    def camera_for(self, detections: Detections2D) -> Camera:
        """The camera model at the detections' image size (camera_info if any, else the field of view)."""
        width, height = int(detections.image_width), int(detections.image_height)
        intrinsics = self._intrinsics
        if intrinsics is None:
            intrinsics = CameraIntrinsics.from_fov(width, height, self.params["camera.horizontal_fov_deg"])
        elif intrinsics.width_px != width:
            intrinsics = intrinsics.scaled_to_width(width)
        return Camera(intrinsics, self.mount)

    def _on_candidates(self, msg: CandidateTrajectories) -> None:
        started = time.perf_counter()
        if not msg.candidates:
            self.health.count("empty_candidate_sets")
            return
        detections = self._detections
        age_s = (stamp_ns(msg.header) - stamp_ns(detections.header)) / 1e9 if detections is not None else None
        boxes = np.zeros((0, 4))
        if detections is not None and abs(age_s) <= self.settings.detections_max_age_s:
            boxes = np.array([[d.x_min, d.y_min, d.x_max, d.y_max] for d in detections.detections]).reshape(
                -1, 4
            )
        try:
            agents = (
                agents_from_boxes(boxes, self.camera_for(detections), self.settings)
                if len(boxes)
                else Agents.none()
            )
            candidates = [waypoints_of(c) for c in msg.candidates]
            result = score_candidates(candidates, self._velocity_mps, agents, self.settings)
        except InputError as error:
            self.health.problem("candidates", str(error))
            return
        trajectories = list(msg.candidates)
        if result.stopped:
            trajectories.append(self._stop_message(msg.candidates[0], result.trajectories[-1]))
            self.health.count("stops")
        scored = CandidateTrajectories(
            header=msg.header,
            candidates=trajectories,
            scores=[
                TrajectoryScore(
                    total=s["pdm_score"],
                    no_collision=s["no_collision"],
                    drivable_area=s["drivable_area"],
                    time_to_collision=s["time_to_collision"],
                    ego_progress=s["ego_progress"],
                    comfort=s["comfort"],
                )
                for s in result.scores
            ],
            selected_index=result.selected,
        )
        self.pub_scored.publish(scored)
        self.pub_trajectory.publish(trajectories[result.selected])
        self.pub_markers.publish(
            trajectory_markers(msg.header, result.trajectories, result.selected, "scorer")
        )
        self.health.record_latency((time.perf_counter() - started) * 1e3, 0.0)
        self.health.count("sets_scored")

    @staticmethod
    def _stop_message(first: PlannedTrajectory, waypoints_ego: np.ndarray) -> PlannedTrajectory:
        """The scorer's stop as a trajectory of the planner's first candidate's frame, command and model."""
        return planned_trajectory(
            first.header,
            waypoints_ego,
            status=PlannedTrajectory.STATUS_DEGRADED,
            status_reason="scorer stop: every candidate hits a detected vehicle",
            command=first.command,
            decoder=first.decoder,
            model_name=first.model_name,
        )

    def _publish_diagnostics(self) -> None:
        extra = {"camera_info": "received" if self._intrinsics is not None else "none (field-of-view guess)"}
        self.pub_diagnostics.publish(self.health.array(self.get_clock().now().to_msg(), extra))


def main(args: list[str] | None = None) -> int:
    return spin_node(ScorerNode, args)


if __name__ == "__main__":
    sys.exit(main())
