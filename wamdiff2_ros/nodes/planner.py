"""PlannerNode: camera + ego state -> planned trajectory, K candidates, Path, markers, diagnostics.

Threads: the executor thread only checks and synchronises inputs (cheap: a frame's pixels are not touched)
and hands matched frames to a newest-input-wins worker, which converts the frame it takes and runs the
model; results are published from the worker thread. A slow model therefore drops stale frames (counted, at
next to no cost) and never starves the state callbacks.

Rejected input (a frame in an unusable encoding or size, a stale frame, a non-finite state): the problem is
diagnosed (WARN) and, while inputs keep arriving but none can be planned, a fallback plan flagged with the
rejection is published every ``fallback.rejected_input_s`` (the held plan shifted in time while it is within
``fallback.hold_s``, then a stop: as for model failures); once no model plan has been published for
``diagnostics.no_plan_error_s`` although inputs arrive, /diagnostics says ERROR. The model loads on a thread
of its own at start-up while diagnostics report "loading", then, with ``warmup.image_size`` set, warms up at
that frame size (``Planner.warm_up``: plan, and detect if detections are on) while they report "warming up";
frames arriving before the model is ready are counted (``frames_before_model_ready``), never queued.

Topics (private, remapped by the launch file):
  in:  ~/input/image (sensor_msgs/Image, or ~/input/image/compressed with input.compressed),
       ~/input/odometry (nav_msgs/Odometry), ~/input/imu (sensor_msgs/Imu), ~/input/command (DrivingCommand),
       ~/input/route (nav_msgs/Path, read by a model of the ``branch_route`` rule or one that plans along
           the route only; qos.route_durability)
  out: ~/output/trajectory (PlannedTrajectory), ~/output/candidates (CandidateTrajectories, unscored),
       ~/output/path (nav_msgs/Path), ~/output/markers (MarkerArray), ~/output/detections (Detections2D,
       every output.detections_every_n plans, header = the image's), ~/debug/image_detections (Image, the
       frame with its boxes, only while subscribed), ~/debug/processing_time_ms (Float64),
       /diagnostics (DiagnosticArray)
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry, Path
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, Imu
from std_msgs.msg import Float64, Header
from visualization_msgs.msg import MarkerArray

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner, PlanOutput
from wamdiff2_ros.errors import InputError, Wamdiff2Error
from wamdiff2_ros.model.plan_frame import DEFAULT_PLAN_FRAME
from wamdiff2_ros.model.prompt import ROUTE_COMMAND_RULE, detection_user_text
from wamdiff2_ros.msg import CandidateTrajectories, Detections2D, DrivingCommand, PlannedTrajectory
from wamdiff2_ros.nodes import qos
from wamdiff2_ros.nodes.allocator import keep_frame_buffers_in_heap
from wamdiff2_ros.nodes.convert.detections import detections_2d
from wamdiff2_ros.nodes.convert.images import (
    camera_layout,
    camera_rgb8,
    compressed_to_numpy,
    numpy_to_image,
    to_rgb8,
)
from wamdiff2_ros.nodes.convert.odometry import (
    AccelerationFromVelocity,
    EgoMotion,
    ego_position,
    ego_velocity_mps,
    imu_acceleration_mps2,
    stamp_ns,
)
from wamdiff2_ros.nodes.convert.route import (
    NoRouteShape,
    Route,
    route_from_path,
    route_shape_ahead,
    route_window,
)
from wamdiff2_ros.nodes.convert.trajectories import decoder_info, path, planned_trajectory, waypoints_of
from wamdiff2_ros.nodes.diagnostics import NodeHealth, steady_clock
from wamdiff2_ros.nodes.entry import spin_node
from wamdiff2_ros.nodes.fallback import advance_plan, stop_trajectory
from wamdiff2_ros.nodes.markers import draw_boxes, trajectory_markers
from wamdiff2_ros.nodes.params import PLANNER_PARAMS, declare, decode_config, image_size_hw
from wamdiff2_ros.nodes.sync import ApproximateSync, Match
from wamdiff2_ros.nodes.worker import LatestInputWorker

COMMAND_WORDS = {
    DrivingCommand.LEFT: "left",
    DrivingCommand.STRAIGHT: "straight",
    DrivingCommand.RIGHT: "right",
    DrivingCommand.UNKNOWN: "unknown",
}


class Frame:
    """A camera frame waiting for the worker; its pixels are converted on first use (on the worker thread),
    so a frame the worker never takes costs no conversion and no copy.

    Args:
        header: the frame's header.
        convert: makes the (H, W, 3) uint8 RGB pixels; may raise ``InputError`` (e.g. a corrupt JPEG).
        received_monotonic_s: when the executor received it.
        age_at_receipt_s: its stamp's age then, on the node's clock (the camera's capture to the node's
            callback: the driver, DDS and the executor, as far as the two clocks agree).
    """

    def __init__(
        self,
        header: Header,
        convert: Callable[[], np.ndarray],
        received_monotonic_s: float,
        age_at_receipt_s: float,
    ) -> None:
        self.header, self._convert = header, convert
        self.received_monotonic_s, self.age_at_receipt_s = received_monotonic_s, age_at_receipt_s

    @cached_property
    def image_rgb(self) -> np.ndarray:
        return self._convert()


@dataclass(frozen=True)
class HeldPlan:
    stamp_ns: int
    waypoints_ego: np.ndarray


# What the worker takes: the synced frame and ego state, the command code and its branch distance (or None).
WorkItem = tuple[Match[Frame, EgoMotion], int, float | None]


class PlannerNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("wamdiff2_planner", **kwargs)
        self.params = declare(self, PLANNER_PARAMS)
        p = self.params
        if p["input.frame_buffers_in_heap"]:
            keep_frame_buffers_in_heap()  # before the first frame: each would be page-faulted in anew
        self.health = NodeHealth(self.get_fully_qualified_name())
        self.sync: ApproximateSync[Frame, EgoMotion] = ApproximateSync(slop_s=p["input.sync_slop_s"])
        self._sync_lock = threading.Lock()
        self._acceleration = AccelerationFromVelocity()
        self._imu: tuple[int, tuple[float, float]] | None = None
        self._command: tuple[int, float | None] = (DrivingCommand.UNKNOWN, None)
        # The plan the hold fallback shifts in time. Two threads touch it: the worker thread sets it (a good
        # plan, _on_result) and reads it (_fallback), the executor thread clears it (a time jump, _note_sync);
        # _held_lock guards every access (taken after _sync_lock there, and alone elsewhere).
        self._held: HeldPlan | None = None
        self._held_lock = threading.Lock()
        self._last_received_s: dict[str, float] = {}
        # Watchdog state (monotonic seconds): the newest rejected input since the last published trajectory,
        # that publication, and the last model plan (status OK).
        self._rejected: tuple[Header, str] | None = None
        self._last_published_s = self._last_plan_s = time.monotonic()
        self._last_state: EgoMotion | None = None
        self._plans_since_detection = 0
        self.planner: Planner | None = None  # set once loaded and warmed up: from then on frames are planned
        self._loaded: Planner | None = None  # set once loaded, before the warm-up: for memory statistics

        self.pub_trajectory = self.create_publisher(PlannedTrajectory, "~/output/trajectory", qos.RELIABLE)
        self.pub_candidates = self.create_publisher(
            CandidateTrajectories, "~/output/candidates", qos.RELIABLE
        )
        self.pub_path = self.create_publisher(Path, "~/output/path", qos.RELIABLE)
        self.pub_markers = self.create_publisher(MarkerArray, "~/output/markers", qos.RELIABLE)
        self.pub_detections = self.create_publisher(Detections2D, "~/output/detections", qos.RELIABLE)
        self.pub_detection_image = self.create_publisher(Image, "~/debug/image_detections", qos.camera())
        self.pub_processing = self.create_publisher(Float64, "~/debug/processing_time_ms", qos.RELIABLE)
        self.pub_diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", qos.RELIABLE)

        camera_qos = qos.camera(p["qos.image_reliability"], p["qos.image_depth"])
        if p["input.compressed"]:
            self.create_subscription(
                CompressedImage, "~/input/image/compressed", self._on_compressed, camera_qos
            )
        else:
            self.create_subscription(Image, "~/input/image", self._on_image, camera_qos)
        self.create_subscription(Odometry, "~/input/odometry", self._on_odometry, qos.RELIABLE)
        self.create_subscription(Imu, "~/input/imu", self._on_imu, qos.RELIABLE)
        self.create_subscription(DrivingCommand, "~/input/command", self._on_command, qos.RELIABLE)
        self._route: Route | None = None  # the newest usable route (executor thread writes, worker reads)
        self.create_subscription(Path, "~/input/route", self._on_route, qos.route(p["qos.route_durability"]))
        # Wall-clock (steady) timer: under use_sim_time a ROS timer waits for /clock, and "image never
        # received" would stay unreported until the simulator runs (and stop when it pauses).
        self.create_timer(p["diagnostics.period_s"], self._publish_diagnostics, clock=steady_clock())
        self.create_timer(p["fallback.rejected_input_s"] / 2, self._watch_rejections, clock=steady_clock())
        self.worker = LatestInputWorker(
            self._infer,
            self._on_result,
            self._on_inference_error,
            name="planner",
            wait_for_fresher=p["input.wait_for_fresher_frame"],
        )
        threading.Thread(target=self._load_model, name="model-loader", daemon=True).start()

    # --- model ---------------------------------------------------------------------------------------

    def decode_config(self) -> DecodeConfig:
        return decode_config(self.params)

    def _load_model(self) -> None:
        p = self.params
        preset = f"preset {p['model.preset']}" if p["model.preset"] else "the default model"
        source = p["model.checkpoint"] or preset
        self._set_model_state("loading", source)
        started = time.perf_counter()
        try:
            planner = Planner.from_settings(
                self.decode_config(),
                checkpoint=p["model.checkpoint"] or None,
                preset=p["model.preset"],
                device=p["model.device"],
                dtype=p["model.dtype"],
                max_pixels=p["input.max_pixels"] or None,
                smoothing=p["output.smoothing"],
            )
        except Exception as error:  # reported as an ERROR diagnostic; the node stays up
            self._set_model_state("error", f"{type(error).__name__}: {error}")
            self.get_logger().error(f"model {source} failed to load: {error}")
            return
        self._loaded = planner
        message = f"{planner.name} in {time.perf_counter() - started:.1f} s"
        if planner.command_rule == ROUTE_COMMAND_RULE:  # every prompt it learnt from had the route's shape
            message += ", reads the route on ~/input/route"
        if planner.plan_frame != DEFAULT_PLAN_FRAME:  # its answers are along the route
            message += ", plans along the route on ~/input/route"
        image_hw = image_size_hw(p["warmup.image_size"])
        if image_hw is not None:
            message += self._warm_up(planner, image_hw)
        self._last_plan_s = time.monotonic()  # the no-plan alarm counts from readiness
        self.planner = planner  # from here on frames reach the worker
        self._set_model_state("ready", message)
        self.get_logger().info(f"model {message}: ready on {p['model.device']} ({planner.config.backend})")

    def _warm_up(self, planner: Planner, image_hw: tuple[int, int]) -> str:
        """Plan (and detect, if the node will) at the camera's frame size, so the first real frame finds
        compiled code, CUDA graphs and grammar tables ready. A failed warm-up is a diagnosed problem, not a
        dead node: planning goes on (its first frames may be slow, or fail and fall back)."""
        detect = self.params["output.detections_every_n"] > 0
        what = f"{image_hw[1]}x{image_hw[0]} frame" + (" with detection" if detect else "")
        self._set_model_state("warming up", f"{planner.name} on a {what}")
        self.get_logger().info(f"warming {planner.name} up on a {what}")
        budget = self.params["output.detections_max_tokens"]
        try:  # on the worker thread: the memory it grows (its allocator arena) is what frames use
            seconds = self.worker.call(
                lambda: planner.warm_up(image_hw, detect=detect, detect_max_tokens=budget)
            )
        except Exception as error:  # reported as a problem; the node stays up
            reason = f"{type(error).__name__}: {error}"
            self.health.problem("warmup", reason)
            self.get_logger().error(f"warm-up failed, planning without it: {reason}")
            return f", warm-up failed ({reason})"
        return f", warmed up in {seconds:.1f} s"

    # --- inputs (executor thread) --------------------------------------------------------------------

    def _seen(self, topic: str) -> None:
        self._last_received_s[topic] = time.monotonic()

    def _on_image(self, msg: Image) -> None:
        self._seen("image")
        try:
            layout = camera_layout(msg)  # the fields only: the pixels wait for the worker
        except InputError as error:
            self._reject("image", str(error), msg.header)
            return
        reason = self._too_small(layout.height, layout.width)
        if reason:
            self._reject("image", reason, msg.header)
            return
        self._offer_frame(msg.header, lambda: camera_rgb8(msg))

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._seen("image")
        if len(msg.data) == 0:
            self._reject("image", f"compressed image ({msg.format!r}) has no data", msg.header)
            return
        self._offer_frame(msg.header, lambda: self._decoded_rgb(msg))

    def _decoded_rgb(self, msg: CompressedImage) -> np.ndarray:
        # Worker thread: decoding is the expensive part, done for taken frames only.
        pixels, encoding = compressed_to_numpy(msg)
        reason = self._too_small(*pixels.shape[:2])
        if reason:
            raise InputError(reason)
        return to_rgb8(pixels, encoding)

    def _too_small(self, height: int, width: int) -> str | None:
        """Why a frame of this size is rejected (``input.min_image_side_px``), or None."""
        smallest = self.params["input.min_image_side_px"]
        if min(height, width) >= smallest:
            return None
        return f"frame is {width}x{height} px; input.min_image_side_px is {smallest}"

    def _reject(self, kind: str, reason: str, header: Header) -> None:
        """Diagnose a rejected input and keep it for the watchdog (``_watch_rejections``)."""
        self.health.problem(kind, reason)
        with self._held_lock:
            self._rejected = (header, f"{kind}: {reason}")

    def _offer_frame(self, header: Header, convert: Callable[[], np.ndarray]) -> None:
        age_s = (self.get_clock().now().nanoseconds - stamp_ns(header)) / 1e9
        if age_s > self.params["input.max_age_s"]:
            self._reject("stale_image", f"frame is {age_s:.2f} s old (input.max_age_s)", header)
            return
        with self._sync_lock:
            resets = self.sync.counts["reset"]
            frame = Frame(header, convert, time.monotonic(), age_s)
            match = self.sync.add_frame(stamp_ns(header), frame)
            self._note_sync(resets)
        self._submit(match)

    def _on_odometry(self, msg: Odometry) -> None:
        self._seen("odometry")
        stamp = stamp_ns(msg.header)
        try:
            velocity = ego_velocity_mps(msg, self.params["input.twist_in_parent_frame"])
        except InputError as error:
            self._reject("state", str(error), msg.header)
            return
        derived = self._acceleration.update(stamp, velocity)
        imu = self._imu
        fresh_ns = self.params["input.imu_max_age_s"] * 1e9
        use_imu = self.params["input.use_imu"] and imu is not None and abs(stamp - imu[0]) <= fresh_ns
        motion = EgoMotion(stamp, velocity, imu[1] if use_imu else derived, ego_position(msg))
        self._last_state = motion
        with self._sync_lock:
            resets = self.sync.counts["reset"]
            match = self.sync.add_state(stamp, motion)
            self._note_sync(resets)
        self._submit(match)

    def _note_sync(self, resets_before: int) -> None:
        if self.sync.counts["reset"] > resets_before:
            self.health.problem("time_jump", "input stamps jumped backwards; synchroniser reset")
            with self._held_lock:
                self._held = None

    def _on_imu(self, msg: Imu) -> None:
        self._seen("imu")
        try:
            self._imu = (stamp_ns(msg.header), imu_acceleration_mps2(msg))
        except InputError as error:
            self.health.problem("imu", str(error))

    def _on_command(self, msg: DrivingCommand) -> None:
        self._seen("command")
        if msg.command not in COMMAND_WORDS:
            self.health.problem("command", f"unknown driving command {msg.command}; using UNKNOWN")
        distance_m = float(msg.distance_m) if msg.has_distance else None
        if distance_m is not None and not (math.isfinite(distance_m) and distance_m >= 0.0):
            self.health.problem("command", f"branch distance {msg.distance_m} m is not a distance; ignored")
            distance_m = None
        self._command = (msg.command if msg.command in COMMAND_WORDS else DrivingCommand.UNKNOWN, distance_m)

    def _on_route(self, msg: Path) -> None:
        self._seen("route")
        if not msg.poses:  # the CARLA bridge's way of saying there is no route (no goal, no ego)
            self._route = None
            self.health.problem("route", "route withdrawn (an empty path)")
            return
        try:
            self._route = route_from_path(msg)
        except InputError as error:  # a malformed route: the last usable one stays
            self.health.problem("route", f"route ignored: {error}")

    def _submit(self, match: Match[Frame, EgoMotion] | None) -> None:
        if match is None:
            return
        if self.planner is None:
            self.health.count("frames_before_model_ready")
            return
        self.worker.submit((match, *self._command))

    # --- inference (worker thread) -------------------------------------------------------------------

    def _infer(self, item: WorkItem) -> PlanOutput:
        match, command, distance_m = item
        state, frame = match.state, match.frame
        started = time.monotonic()
        image = frame.image_rgb  # converted here, for the frames the worker takes only
        converted = time.monotonic()
        route, window = None, None  # NoRouteShape: the fallback, diagnosed
        if self.planner.command_rule == ROUTE_COMMAND_RULE:
            route = route_shape_ahead(self._route, state.position)
        if self.planner.plan_frame != DEFAULT_PLAN_FRAME:
            window = route_window(self._route, state.position)
        inputs = DrivingInputs(
            image,
            COMMAND_WORDS[command],
            state.velocity_mps,
            state.acceleration_mps2,
            distance_m,
            route,
            window,
        )
        output = self.planner.plan(inputs)
        # What the node adds to the plan's own stages: the frame's way here, waiting for the worker, and the
        # frame's conversion (publishing is added once the outputs are out: _on_result).
        output.stages_s["delivery"] = frame.age_at_receipt_s
        output.stages_s["queue"] = started - frame.received_monotonic_s
        output.stages_s["convert"] = converted - started
        return output

    def _on_result(self, item: WorkItem, output: PlanOutput, seconds: float) -> None:
        match, command, _ = item
        header = Header(stamp=match.frame.header.stamp, frame_id=self.params["output.frame_id"])
        result, config = output.decode, output.config
        info = decoder_info(
            block_size=config.block_size,
            max_steps=config.steps,
            steps_used=result.steps_per_block,
            forwards=result.forwards,
            commit_rule=config.commit_rule,
            threshold=config.threshold,
            temperature=config.temperature,
            seed=config.seed,
            grammar_constrained=config.grammar,
            prefill_ms=result.prefill_s * 1e3,
            latency_ms=(time.monotonic() - match.frame.received_monotonic_s) * 1e3,
        )
        name = self.planner.name
        candidates = []
        for candidate in output.candidates:
            if candidate.waypoints_ego is None:
                self.health.problem("parse", candidate.parse_error)
                continue
            candidates.append(
                planned_trajectory(
                    header,
                    candidate.waypoints_ego,
                    raw_text=candidate.text,
                    command=command,
                    decoder=info,
                    model_name=name,
                )
            )
        first = output.candidates[0]
        if first.waypoints_ego is not None:
            trajectory = candidates[0]
            with self._held_lock:
                self._held = HeldPlan(stamp_ns(header), first.waypoints_ego)
                self._rejected = None  # planning again: the watchdog has nothing to cover
            self._last_plan_s = time.monotonic()
        else:
            trajectory = self._fallback(
                header, match.state, f"model answer did not parse: {first.parse_error}", first.text
            )
            if trajectory is None:
                return
            trajectory.command, trajectory.decoder, trajectory.model_name = command, info, name
        publishing = time.monotonic()
        self._publish(header, trajectory, candidates, match.state)
        output.stages_s["publish"] = time.monotonic() - publishing
        age_ms = (self.get_clock().now().nanoseconds - stamp_ns(header)) / 1e6
        self.health.record_latency(info.latency_ms, age_ms)
        self.health.record_stages({stage: value * 1e3 for stage, value in output.stages_s.items()})
        self.pub_processing.publish(Float64(data=seconds * 1e3))
        self._maybe_detect(match.frame)

    def _maybe_detect(self, frame: Frame) -> None:
        """Every N-th plan, run the detection prompt on the same frame (after the plan is out)."""
        every = self.params["output.detections_every_n"]
        self._plans_since_detection += 1
        if every == 0 or self._plans_since_detection < every:
            return
        self._plans_since_detection = 0
        output = self.planner.detect(
            frame.image_rgb, detection_user_text(), self.params["output.detections_max_tokens"]
        )
        if output.parse_error:
            self.health.note(
                "detection_parse", output.parse_error
            )  # the model's quality, not the node's health
        try:
            message = detections_2d(output, frame.header, frame.image_rgb.shape[:2])
        except InputError as error:  # diagnosed; the plan of this frame is out already, so no fallback
            self.health.problem("detection", str(error))
            return
        self.pub_detections.publish(message)
        if self.pub_detection_image.get_subscription_count() > 0:
            drawn = draw_boxes(frame.image_rgb[:, :, ::-1], output.boxes_px, output.labels, output.scores)
            self.pub_detection_image.publish(numpy_to_image(drawn, "bgr8", frame.header))

    def _on_inference_error(self, item: WorkItem, error: BaseException) -> None:
        match, command, _ = item
        out_of_memory = Planner.is_out_of_memory(error)
        reason = f"{type(error).__name__}: {error}"
        if isinstance(error, NoRouteShape):  # a route model with no route for this position
            kind, what = "route", "no route"
        elif isinstance(error, InputError):  # the frame, converted on this thread, was unusable
            kind, what = "image", "input rejected"
        else:
            kind, what = ("out_of_memory" if out_of_memory else "model"), "model failed"
        self.health.problem(kind, reason)
        if out_of_memory and self.planner is not None:
            self.planner.release_memory()  # the allocator's cached blocks go back before the next frame
        if not isinstance(error, Wamdiff2Error):
            self.get_logger().error(f"inference failed: {reason}")
        header = Header(stamp=match.frame.header.stamp, frame_id=self.params["output.frame_id"])
        trajectory = self._fallback(header, match.state, f"{what}: {reason}", "")
        if trajectory is not None:
            trajectory.command = command
            self._publish(header, trajectory, [], match.state)

    def _fallback(
        self, header: Header, state: EgoMotion, reason: str, raw_text: str
    ) -> PlannedTrajectory | None:
        """The configured fallback plan (always finite), or None for fallback.mode = none."""
        mode = self.params["fallback.mode"]
        if mode == "none":
            return None
        with self._held_lock:
            held = self._held
        elapsed_s = (stamp_ns(header) - held.stamp_ns) / 1e9 if held is not None else None
        if mode == "hold" and elapsed_s is not None and 0 <= elapsed_s <= self.params["fallback.hold_s"]:
            waypoints, how = (
                advance_plan(held.waypoints_ego, elapsed_s),
                f"holding the plan of {elapsed_s:.2f} s ago",
            )
        else:
            waypoints = stop_trajectory(float(np.hypot(*state.velocity_mps)))
            if mode == "stop":
                how = "stopping"
            elif elapsed_s is None:
                how = "stopping (no plan to hold)"
            else:
                how = f"stopping (the last plan is {elapsed_s:.2f} s from this frame, beyond fallback.hold_s)"
        self.health.count("fallbacks")
        return planned_trajectory(
            header,
            waypoints,
            status=PlannedTrajectory.STATUS_FALLBACK,
            status_reason=f"{reason}; {how}",
            raw_text=raw_text,
        )

    def _watch_rejections(self) -> None:
        """Steady-clock timer: while inputs arrive but are rejected (nothing reaches the worker), publish the
        fallback plan, flagged with the newest rejection, every ``fallback.rejected_input_s``."""
        if self.planner is None or self.worker.busy:
            return
        with self._held_lock:
            rejected = self._rejected
        if (
            rejected is None
            or time.monotonic() - self._last_published_s < self.params["fallback.rejected_input_s"]
        ):
            return
        rejected_header, reason = rejected
        header = Header(stamp=rejected_header.stamp, frame_id=self.params["output.frame_id"])
        state = self._last_state or EgoMotion(stamp_ns(header), (0.0, 0.0), (0.0, 0.0))
        trajectory = self._fallback(header, state, f"input rejected: {reason}", "")
        with self._held_lock:
            self._rejected = None  # the next rejection re-arms the watchdog
        if trajectory is not None:
            self._publish(header, trajectory, [], state)

    def _publish(
        self, header: Header, trajectory: PlannedTrajectory, candidates: list, state: EgoMotion
    ) -> None:
        self._last_published_s = time.monotonic()
        self.pub_trajectory.publish(trajectory)
        self.pub_candidates.publish(
            CandidateTrajectories(header=header, candidates=candidates, selected_index=-1)
        )
        self.pub_path.publish(path(header, waypoints_of(trajectory)))
        fallback = trajectory.status == PlannedTrajectory.STATUS_FALLBACK
        drawn = [waypoints_of(trajectory)] + [waypoints_of(c) for c in candidates[1:]]
        self.pub_markers.publish(trajectory_markers(header, drawn, 0, "planner", fallback=fallback))
        self.health.count("plans_published")

    # --- diagnostics ---------------------------------------------------------------------------------

    def _set_model_state(self, state: str, message: str = "") -> None:
        """Change the model state and report it at once (a warm-up may be shorter than the report period)."""
        self.health.set_model_state(state, message)
        self._publish_diagnostics()

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        for topic in ("image", "odometry"):
            last = self._last_received_s.get(topic)
            limit_s = self.params["diagnostics.missing_topic_s"]
            if self.planner is not None and (last is None or now - last > limit_s):
                waited = "never received" if last is None else f"nothing for {now - last:.2f} s"
                waited += f" (diagnostics.missing_topic_s {limit_s:g})"
                self.health.problem(f"missing_{topic}", f"~/input/{topic}: {waited}")
        worker = self.worker
        extra = {
            "frames_submitted": str(worker.submitted),
            "frames_dropped_stale": str(worker.dropped),
            "frames_planned": str(worker.completed),
            "frames_failed": str(worker.failed),
            **{f"sync.{key}": str(value) for key, value in sorted(self.sync.counts.items())},
        }
        memory_mb = self._loaded.memory_allocated_mb() if self._loaded is not None else None
        if memory_mb is not None:  # None on a CPU model
            extra["gpu_memory_allocated_mb"] = f"{memory_mb:.0f}"
        stamp = self.get_clock().now().to_msg()
        self.pub_diagnostics.publish(self.health.array(stamp, extra, self._no_plan_alarm(now)))

    def _no_plan_alarm(self, now: float) -> str | None:
        """ERROR text when inputs arrive but no model plan came out for ``diagnostics.no_plan_error_s``
        (rejected input, failing model); a worker in the middle of a plan is still trying (a slow model)."""
        limit = self.params["diagnostics.no_plan_error_s"]
        silent_s = now - self._last_plan_s
        inputs_arrive = any(now - seen <= limit for seen in self._last_received_s.values())
        if self.planner is None or self.worker.busy or silent_s <= limit or not inputs_arrive:
            return None
        return (
            f"no model plan for {silent_s:.1f} s while inputs arrive (diagnostics.no_plan_error_s {limit:g})"
        )

    def destroy_node(self) -> None:
        # rclpy's shutdown destroys a node whose constructor failed (a parameter of the wrong type) too
        if hasattr(self, "worker"):
            self.worker.stop()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return spin_node(PlannerNode, args)


if __name__ == "__main__":
    sys.exit(main())
