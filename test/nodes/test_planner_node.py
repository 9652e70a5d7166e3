"""PlannerNode as a separate process over real DDS, tiny random-weight preset on the CPU.

One planner process serves the module; each test drives it through its input topics from this process and
checks what comes out (stamps, frames, shapes, diagnostics), as a camera driver and a consumer would.
"""

from __future__ import annotations

import math
import pathlib
import re
import time

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from nav_msgs.msg import Odometry, Path
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.parameter import Parameter
from ros_harness import Probe, node_command, node_output, start_node, start_process, stop_node
from sensor_msgs.msg import Image
from std_msgs.msg import Float64, Header
from visualization_msgs.msg import MarkerArray

from wamdiff2_ros.decoding.planner import Planner
from wamdiff2_ros.model.parse import salvage_detections
from wamdiff2_ros.msg import CandidateTrajectories, Detections2D, DrivingCommand, PlannedTrajectory
from wamdiff2_ros.nodes.convert.images import numpy_to_image
from wamdiff2_ros.nodes.planner import PlannerNode
from wamdiff2_ros.nodes.qos import RELIABLE

NS = "/planner_test"
NODE = f"{NS}/wamdiff2_planner"
PARAMS = {
    "model.preset": "tiny",
    "decoder.steps": 4,
    "candidates.count": 3,
    "output.frame_id": "ego_vehicle",
    "qos.image_reliability": "reliable",
    "diagnostics.period_s": 0.2,
    "diagnostics.missing_topic_s": 0.5,
    "input.max_age_s": 30.0,
    "fallback.hold_s": 5.0,
    "output.detections_every_n": 2,
    "output.detections_max_tokens": 32,
}
OUTPUTS = {
    f"{NODE}/output/trajectory": PlannedTrajectory,
    f"{NODE}/output/candidates": CandidateTrajectories,
    f"{NODE}/output/path": Path,
    f"{NODE}/output/markers": MarkerArray,
    f"{NODE}/debug/processing_time_ms": Float64,
    f"{NODE}/output/detections": Detections2D,
    "/diagnostics": DiagnosticArray,
}


class Driver:
    """Publishes camera frames and odometry into the planner like a car's drivers would."""

    def __init__(self, probe: Probe, planner: str = NODE) -> None:
        node = probe.node
        self.probe = probe
        self.image = node.create_publisher(Image, f"{planner}/input/image", RELIABLE)
        self.odometry = node.create_publisher(Odometry, f"{planner}/input/odometry", RELIABLE)
        self.command = node.create_publisher(DrivingCommand, f"{planner}/input/command", RELIABLE)
        self.frame = np.random.default_rng(3).integers(0, 256, size=(180, 320, 3), dtype=np.uint8)

    def now(self) -> Time:
        return self.probe.node.get_clock().now().to_msg()

    def send(self, stamp: Time, image: Image | None = None, vx: float = 5.0) -> None:
        odometry = Odometry(header=Header(stamp=stamp, frame_id="map"), child_frame_id="ego_vehicle")
        odometry.twist.twist.linear.x = vx
        self.odometry.publish(odometry)
        frame = image if image is not None else numpy_to_image(self.frame, "bgr8")
        frame.header = Header(stamp=stamp, frame_id="camera_front")
        self.image.publish(frame)
        self.odometry.publish(odometry)  # a state at the frame's stamp completes the match


@pytest.fixture(scope="module")
def planner(ros_context):
    process = start_node("wamdiff2_ros.nodes.planner", NS, PARAMS)
    probe = Probe(ros_context, "planner_probe", OUTPUTS)
    driver = Driver(probe)
    ready = probe.spin_until(
        lambda: any(
            kv.key == "model_state" and kv.value == "ready"
            for d in probe.received["/diagnostics"]
            for s in d.status
            for kv in s.values
        ),
        timeout_s=60,
    )
    assert ready, "planner did not report a loaded model:\n" + stop_node(process)
    yield process, probe, driver
    probe.close()
    stop_node(process)


def plan_once(planner, image: Image | None = None, vx: float = 5.0) -> tuple[PlannedTrajectory, Time]:
    """Stream frames (a fresh stamp every 0.5 s, like a camera) until a trajectory for one of them arrives.

    Streaming matters: messages of different topics may arrive in any order, so one frame can lose its
    match (e.g. to a late, older state that resets the synchroniser after a bad-input test).
    """
    return _plan_once_on(planner, NODE, image, vx)


def _plan_once_on(
    planner, node: str, image: Image | None = None, vx: float = 5.0
) -> tuple[PlannedTrajectory, Time]:
    process, probe, driver = planner
    topic = f"{node}/output/trajectory"
    sent: list[Time] = []
    last_send = [0.0]

    def stream():
        if time.monotonic() - last_send[0] > 0.5:
            sent.append(driver.now())
            driver.send(sent[-1], image, vx)
            last_send[0] = time.monotonic()

    def answered():
        return any(t.header.stamp in sent for t in probe.received[topic])

    arrived = probe.spin_until(answered, 30, during=stream)
    assert arrived, f"no trajectory; diagnostics:\n{latest_problems(probe)}\nnode:\n{node_output(process)}"
    assert process.poll() is None
    trajectory = next(t for t in reversed(probe.received[topic]) if t.header.stamp in sent)
    return trajectory, trajectory.header.stamp


@pytest.mark.ros
def test_diagnostics_report_the_median_of_each_plan_stage(planner) -> None:
    process, probe, _ = planner
    plan_once(planner)

    def stages() -> dict[str, str]:
        for report in reversed(probe.received["/diagnostics"]):
            values = {kv.key: kv.value for s in report.status for kv in s.values}
            if "stage_p50_ms.decode" in values:
                return values
        return {}

    assert probe.spin_until(lambda: bool(stages()), 10), node_output(process)
    for stage in ("preprocess", "vision", "prefill", "decode", "parse", "queue", "convert", "publish"):
        assert float(stages()[f"stage_p50_ms.{stage}"]) >= 0.0
    assert float(stages()["stage_p50_ms.decode"]) > 0.0


@pytest.mark.ros
def test_frame_and_odometry_produce_a_well_formed_trajectory(planner) -> None:
    trajectory, stamp = plan_once(planner)
    assert trajectory.header.stamp == stamp and trajectory.header.frame_id == "ego_vehicle"
    assert len(trajectory.points) == 8
    assert all(math.isfinite(p.position.x) and math.isfinite(p.position.y) for p in trajectory.points)
    assert [
        p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in trajectory.points
    ] == pytest.approx([0.5 * k for k in range(1, 9)])
    assert trajectory.decoder.grammar_constrained and trajectory.decoder.block_size == 32
    assert trajectory.status == PlannedTrajectory.STATUS_OK, trajectory.status_reason
    assert trajectory.model_name == "preset:tiny"


@pytest.mark.ros
def test_candidates_path_and_markers_carry_the_source_stamp(planner) -> None:
    _, probe, _ = planner
    trajectory, stamp = plan_once(planner)
    topics = [f"{NODE}/output/candidates", f"{NODE}/output/path", f"{NODE}/output/markers"]

    def stamp_of(msg):
        return msg.markers[-1].header.stamp if isinstance(msg, MarkerArray) else msg.header.stamp

    assert probe.spin_until(
        lambda: all(probe.received[t] and stamp_of(probe.received[t][-1]) == stamp for t in topics), 5
    )
    candidates = probe.received[topics[0]][-1]
    assert len(candidates.candidates) == 3
    assert candidates.candidates[0] == trajectory and candidates.selected_index == -1
    assert len({c.raw_text for c in candidates.candidates}) > 1  # distinct seeds sample distinct answers
    path = probe.received[topics[1]][-1]
    assert len(path.poses) == 9
    markers = probe.received[topics[2]][-1].markers
    assert all(m.header.stamp == stamp and m.header.frame_id == "ego_vehicle" for m in markers)


@pytest.mark.ros
def test_detections_carry_the_image_header_and_size(planner) -> None:
    process, probe, _ = planner
    topic = f"{NODE}/output/detections"
    before = len(probe.received[topic])
    for _ in range(2):  # output.detections_every_n = 2
        plan_once(planner)
    arrived = probe.spin_until(lambda: len(probe.received[topic]) > before, 40)
    assert arrived, f"no detections; diagnostics:\n{latest_problems(probe)}\nnode:\n{node_output(process)}"
    detections = probe.received[topic][-1]
    planned_stamps = [t.header.stamp for t in probe.received[f"{NODE}/output/trajectory"]]
    assert detections.header.frame_id == "camera_front" and detections.header.stamp in planned_stamps
    assert (detections.image_width, detections.image_height) == (320, 180)
    assert detections.raw_text  # random weights: the answer is kept even when it is no valid JSON
    # One Detection2D per well-formed item of the answer. The tiny random-weight model answers "[]" here, so
    # the list may be empty: boxes and their bounds are checked on real boxes in convert/test_detections.py.
    items = salvage_detections(detections.raw_text)[0]
    assert [d.label for d in detections.detections] == [item.label for item in items], detections.raw_text
    for box in detections.detections:
        assert 0 <= box.x_min <= box.x_max <= 320 and 0 <= box.y_min <= box.y_max <= 180


@pytest.mark.ros
def test_a_silent_input_is_reported_missing_after_diagnostics_missing_topic_s(planner) -> None:
    process, probe, _ = planner
    plan_once(planner)  # both inputs seen; from here on the driver sends nothing
    before = len(probe.received["/diagnostics"])
    pattern = re.compile(
        r"missing_odometry: ~/input/odometry: nothing for ([0-9.]+) s \(diagnostics\.missing_topic_s 0\.5\)"
    )

    def silence_s() -> float | None:
        for report in probe.received["/diagnostics"][before:]:
            for status in report.status:
                found = pattern.search(status.message) if status.name == NODE else None
                if found:
                    return float(found.group(1))
        return None

    assert probe.spin_until(lambda: silence_s() is not None, 10), latest_problems(probe)
    # Reported once silent longer than the parameter (0.5 s, named in the message), not the former fixed 2 s;
    # the silence is printed to 0.01 s, so it may read 0.50.
    assert silence_s() >= 0.5, node_output(process)


def bad_image(encoding: str = "bgr8", data_bytes: int | None = None, shape=(180, 320, 3)) -> Image:
    msg = numpy_to_image(np.zeros(shape, np.uint8), "bgr8")
    msg.encoding = encoding
    if data_bytes is not None:
        msg.data = bytes(data_bytes)
    return msg


def latest_problems(probe: Probe) -> str:
    """Every diagnostic message and last_problem value the planner has reported so far, joined."""
    texts = []
    for array in probe.received["/diagnostics"]:
        for status in array.status:
            if status.name == NODE:
                texts.append(status.message)
                texts += [kv.value for kv in status.values if kv.key.startswith("last_problem.")]
    return "\n".join(texts)


def send_bad(driver: Driver, case: str) -> None:
    now = driver.now()
    if case == "unsupported-encoding":
        driver.image.publish(bad_image("yuv422"))
    elif case == "truncated-data":
        driver.image.publish(bad_image(data_bytes=1000))
    elif case == "nan-state":
        odometry = Odometry(header=Header(stamp=now))
        odometry.twist.twist.linear.x = math.nan
        driver.odometry.publish(odometry)
    elif case == "stale-frame":
        driver.send(Time(sec=now.sec - 1000, nanosec=0))
    elif case == "stamps-backwards":
        driver.send(now)
        driver.send(Time(sec=now.sec - 10, nanosec=now.nanosec))
    elif case == "unknown-command":
        driver.command.publish(DrivingCommand(header=Header(stamp=now), command=9))
    elif case == "negative-branch-distance":
        command = DrivingCommand(header=Header(stamp=now), command=DrivingCommand.UNKNOWN, has_distance=True)
        command.distance_m = -5.0
        driver.command.publish(command)
    elif case == "tiny-frame":
        driver.send(now, bad_image(shape=(1, 1, 3)))
    elif case == "unusable-image-shape":
        driver.send(now, bad_image(shape=(40, 8100, 3)))


BAD_INPUTS = [
    ("unsupported-encoding", "unsupported image encoding 'yuv422'"),
    ("truncated-data", "data has 1000 bytes"),
    ("nan-state", "odometry twist is not finite"),
    ("stale-frame", "frame is 1000"),
    ("stamps-backwards", "stamps jumped backwards"),
    ("unknown-command", "unknown driving command 9"),
    ("negative-branch-distance", "branch distance -5.0 m is not a distance"),
    ("tiny-frame", "frame is 1x1 px; input.min_image_side_px is 32"),
    ("unusable-image-shape", "aspect ratio must be at most 200"),
]


@pytest.mark.ros
@pytest.mark.parametrize(("case", "reason"), BAD_INPUTS, ids=[case for case, _ in BAD_INPUTS])
def test_bad_input_is_diagnosed_and_the_node_keeps_planning(planner, case: str, reason: str) -> None:
    process, probe, driver = planner
    last_sent = {"at": -math.inf}

    def send_now_and_then():
        # Again every 2 s until the reason is seen: a single message can miss its match on a loaded machine
        # (one stale-frame run saw neither the frame nor its reason in 20 s). A retry, not a wait.
        if time.monotonic() - last_sent["at"] >= 2.0:
            send_bad(driver, case)
            last_sent["at"] = time.monotonic()

    assert probe.spin_until(lambda: reason in latest_problems(probe), 20, during=send_now_and_then), (
        latest_problems(probe)
    )
    assert process.poll() is None
    trajectory, _ = plan_once(planner)  # still planning afterwards
    assert len(trajectory.points) == 8


@pytest.mark.ros
def test_a_frame_the_planner_refuses_publishes_a_flagged_finite_fallback(planner) -> None:
    _, probe, _ = planner
    topic = f"{NODE}/output/trajectory"
    plan_once(planner)  # a good plan to hold
    before = len(probe.received[topic])
    _, stamp = plan_once(planner, image=bad_image(shape=(40, 8100, 3)))
    fallbacks = [t for t in probe.received[topic][before:] if t.header.stamp == stamp]
    assert fallbacks and fallbacks[0].status == PlannedTrajectory.STATUS_FALLBACK
    assert "input rejected: InputError" in fallbacks[0].status_reason  # the planner refused its aspect ratio
    assert "holding the plan" in fallbacks[0].status_reason  # fallback.mode defaults to hold


@pytest.mark.ros
def test_every_published_trajectory_was_well_formed(planner) -> None:
    """What the earlier tests published, and a plan and a fallback of this test's own (so it runs alone)."""
    _, probe, _ = planner
    _, planned = plan_once(planner)
    _, failed = plan_once(planner, image=bad_image(shape=(40, 8100, 3)))  # refused: a fallback
    trajectories = probe.received[f"{NODE}/output/trajectory"]
    statuses = {t.status for t in trajectories if t.header.stamp in (planned, failed)}
    assert statuses == {PlannedTrajectory.STATUS_OK, PlannedTrajectory.STATUS_FALLBACK}
    for trajectory in trajectories:
        assert len(trajectory.points) == 8
        assert all(math.isfinite(v) for p in trajectory.points for v in (p.position.x, p.position.y, p.speed))


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(Planner, "warm_up"), reason="Planner.warm_up is not there yet")
def test_warm_up_runs_before_ready_and_frames_meanwhile_are_counted_not_queued(ros_context) -> None:
    namespace = "/planner_warmup_test"
    node = f"{namespace}/wamdiff2_planner"
    # A full-size frame at the reference's pixel budget, so the warm-up has work to do. Whether a diagnostic
    # published during the warm-up reaches the probe depends on how soon DDS matches the two (a warm-up can
    # end first on a fast machine), so that the warm-up ran is checked in the node's log, the reports made
    # during it only where they arrived; frames sent before readiness (loading or warming up) are counted.
    topic = f"{node}/output/trajectory"
    outputs = {"/diagnostics": DiagnosticArray, topic: PlannedTrajectory}
    probe = Probe(ros_context, "planner_warmup_probe", outputs)
    driver = Driver(probe, node)
    process = start_node(
        "wamdiff2_ros.nodes.planner", namespace, {**PARAMS, "warmup.image_size": "1920x1080"}
    )
    last_send = [0.0]

    def stream():  # a camera that runs from the start, before the model is ready
        if time.monotonic() - last_send[0] > 0.05:
            driver.send(driver.now())
            last_send[0] = time.monotonic()

    def reports() -> list[tuple[DiagnosticStatus, dict[str, str]]]:
        statuses = [s for d in probe.received["/diagnostics"] for s in d.status if s.name == node]
        return [(s, {kv.key: kv.value for kv in s.values}) for s in statuses]

    def planned_and_reported_ready() -> bool:  # the first plan can come before the first "ready" report
        ready = any(values["model_state"] == "ready" for _, values in reports())
        return ready and bool(probe.received[topic])

    try:
        planned = probe.spin_until(planned_and_reported_ready, 120, during=stream)
        assert planned, f"no plan or no ready report after the warm-up:\n{stop_node(process)}"
    finally:
        probe.close()
        output = stop_node(process)
    assert " up on a 1920x1080 frame with detection" in output, output  # the warm-up's log line
    states = [values["model_state"] for _, values in reports()]
    first_ready = states.index("ready")
    assert "warming up" not in states[first_ready:] and "loading" not in states[first_ready:], states
    warming = [(status, values) for status, values in reports() if values["model_state"] == "warming up"]
    assert all("1920x1080 frame with detection" in status.message for status, _ in warming)
    assert all(values["frames_submitted"] == "0" for _, values in warming)  # nothing queued meanwhile
    ready = reports()[first_ready][1]
    assert "warmed up in" in ready["model"] and "last_problem.warmup" not in ready, output
    # Frames before readiness are counted, not planned. Whether one reached the node before it was ready is
    # DDS's timing too (under load the warm-up can end before the camera's publisher is matched; seen once in
    # a full `make test`): asserted where the node's warm-up reports reached the probe, so the two had met.
    if warming:
        assert int(ready.get("frames_before_model_ready", 0)) > 0, states


@pytest.mark.ros
def test_diagnostics_run_on_wall_time_under_sim_time_before_any_clock(ros_context) -> None:
    # With use_sim_time and no /clock (a simulator not yet started), the missing camera must still be said.
    namespace = "/planner_sim_time_test"
    node = f"{namespace}/wamdiff2_planner"
    process = start_node("wamdiff2_ros.nodes.planner", namespace, {**PARAMS, "use_sim_time": True})
    probe = Probe(ros_context, "planner_sim_time_probe", {"/diagnostics": DiagnosticArray})

    def missing_camera_reported_periodically() -> bool:  # not only at the state change to "ready"
        statuses = [s for d in probe.received["/diagnostics"] for s in d.status if s.name == node]
        return sum("last_problem.missing_image" in {kv.key for kv in s.values} for s in statuses) >= 3

    try:
        assert probe.spin_until(missing_camera_reported_periodically, 60), node_output(process)
    finally:
        probe.close()
        stop_node(process)


WATCH_NS = "/planner_watchdog_test"
WATCH_NODE = f"{WATCH_NS}/wamdiff2_planner"
WATCH_PARAMS = {
    **PARAMS,
    "output.detections_every_n": 0,
    # Longer than a late good frame can keep the worker busy (planning, or waiting up to 1.25 of the test's
    # 0.5 s frame period for a fresher one), during which no rejection fallback is due; on two cores busy
    # with the rest of the suite a tiny-model plan took 2.4 s, and the first rejected frame came 3.4 s after
    # the last planned one.
    "fallback.hold_s": 5.0,
    "fallback.rejected_input_s": 0.1,
    "diagnostics.no_plan_error_s": 0.6,
    "diagnostics.period_s": 0.1,
}


@pytest.mark.ros
def test_continuously_rejected_frames_give_the_held_plan_flagged_then_a_stop_then_error(ros_context) -> None:
    """What a consumer sees while every frame is rejected: fallbacks flagged with the rejection (the held plan
    shifted in time, then a stop once fallback.hold_s is past), /diagnostics ERROR after
    diagnostics.no_plan_error_s; and planning again once good frames return."""
    outputs = {f"{WATCH_NODE}/output/trajectory": PlannedTrajectory, "/diagnostics": DiagnosticArray}
    process = start_node("wamdiff2_ros.nodes.planner", WATCH_NS, WATCH_PARAMS)
    probe = Probe(ros_context, "watchdog_probe", outputs)
    driver = Driver(probe, WATCH_NODE)
    try:
        planner = (process, probe, driver)
        trajectories = probe.received[f"{WATCH_NODE}/output/trajectory"]
        good, _ = _plan_once_on(planner, WATCH_NODE)
        assert good.status == PlannedTrajectory.STATUS_OK
        before = len(trajectories)
        last_send = [0.0]
        sent: list[Time] = []

        def stream_rejected():  # a camera in an encoding the model cannot use, at 20 Hz, good odometry
            if time.monotonic() - last_send[0] > 0.05:
                sent.append(driver.now())
                driver.send(sent[-1], bad_image("16UC1"))
                last_send[0] = time.monotonic()

        def answers() -> list[PlannedTrajectory]:
            # A good frame streamed by _plan_once_on after the one it waited for may still be planned late.
            return [t for t in trajectories[before:] if t.header.stamp in sent]

        def reasons() -> list[str]:
            return [t.status_reason for t in answers()]

        def levels() -> list[tuple[bytes, str]]:
            return [
                (st.level, st.message)
                for array in probe.received["/diagnostics"]
                for st in array.status
                if st.name == WATCH_NODE
            ]

        seen_error = len(levels())
        assert probe.spin_until(
            lambda: (
                any("stopping" in r for r in reasons())
                and any(level == DiagnosticStatus.ERROR for level, _ in levels()[seen_error:])
            ),
            20,
            during=stream_rejected,
        ), f"{reasons()[-3:]}\n{levels()[-3:]}\n{node_output(process)}"
        rejected = answers()
        assert all(t.status == PlannedTrajectory.STATUS_FALLBACK for t in rejected)
        assert all("input rejected: image: cannot use a 16UC1 image" in t.status_reason for t in rejected)
        assert "holding the plan" in rejected[0].status_reason  # first the held plan, then a stop
        for trajectory in rejected:
            assert len(trajectory.points) == 8
            assert all(math.isfinite(v) for p in trajectory.points for v in (p.position.x, p.position.y))
        errors = [message for level, message in levels() if level == DiagnosticStatus.ERROR]
        assert errors and "no model plan for" in errors[-1]
        again, _ = _plan_once_on(planner, WATCH_NODE)  # good frames: planning resumes
        assert again.status == PlannedTrajectory.STATUS_OK
        recovered = len(levels())
        assert probe.spin_until(
            lambda: any(level != DiagnosticStatus.ERROR for level, _ in levels()[recovered:]), 10
        )
    finally:
        probe.close()
        stop_node(process)


@pytest.mark.ros
def test_a_model_out_of_memory_publishes_a_flagged_fallback_releases_and_plans_on(ros_context) -> None:
    # The node's half of the CUDA out-of-memory fault: the model raises it once (test/support/
    # failing_planner_node.py); the H200 test forces a real one at the Planner.
    namespace = "/planner_oom"
    node = f"{namespace}/wamdiff2_planner"
    params = {**PARAMS, "output.detections_every_n": 0}
    script = pathlib.Path(__file__).parents[1] / "support" / "failing_planner_node.py"
    command = node_command("unused", namespace, params)
    process = start_process([command[0], str(script), *command[3:]])
    topic = f"{node}/output/trajectory"
    probe = Probe(ros_context, "oom_probe", {topic: PlannedTrajectory, "/diagnostics": DiagnosticArray})
    try:
        ready = probe.spin_until(lambda: _value(probe, node, "model_state") == "ready", timeout_s=60)
        assert ready, "planner did not load:\n" + node_output(process)
        driver = Driver(probe, node)
        first, _ = _plan_once_on((process, probe, driver), node)
        assert first.status == PlannedTrajectory.STATUS_OK
        # The model's second plan fails, on whichever streamed frame it takes (a slow plan leaves frames
        # of the first call still queued): its fallback, then model plans again without a restart.
        published = probe.received[topic]
        start = next(i for i, t in enumerate(published) if t is first) + 1

        def failed_then_planned() -> bool:
            reasons = [t.status_reason for t in published[start:]]
            failures = [i for i, reason in enumerate(reasons) if "model failed" in reason]
            return (
                any(t.status == PlannedTrajectory.STATUS_OK for t in published[start + failures[0] :])
                if failures
                else False
            )

        streamed = 0.0

        def stream() -> None:
            nonlocal streamed
            if time.monotonic() - streamed > 0.5:
                driver.send(driver.now())
                streamed = time.monotonic()

        assert probe.spin_until(failed_then_planned, 60, during=stream), node_output(process)
        failed = next(t for t in published[start:] if "model failed" in t.status_reason)
        assert failed.status == PlannedTrajectory.STATUS_FALLBACK
        assert "model failed: OutOfMemoryError: CUDA out of memory" in failed.status_reason
        assert len(failed.points) == 8 and all(math.isfinite(p.position.x) for p in failed.points)
        assert probe.spin_until(lambda: _value(probe, node, "problem.out_of_memory") == "1", timeout_s=5)
    finally:
        probe.close()
        output = stop_node(process)
    assert "fault test: release_memory called" in output


def _value(probe: Probe, node: str, key: str) -> str | None:
    """The latest value of ``key`` in ``node``'s diagnostics."""
    for array in reversed(probe.received["/diagnostics"]):
        for status in array.status:
            if status.name.lstrip("/") == node.lstrip("/"):
                for kv in status.values:
                    if kv.key == key:
                        return kv.value
    return None


def test_a_parameter_of_the_wrong_type_is_the_error_the_node_reports() -> None:
    """rclpy's shutdown destroys a node whose constructor failed: that must not hide the cause."""
    context = rclpy.Context()
    rclpy.init(context=context)
    name = "model.device"
    with pytest.raises(InvalidParameterTypeException, match=re.escape(name)) as raised:
        PlannerNode(context=context, parameter_overrides=[Parameter(name, value=False)])
    context.try_shutdown()  # destroys the half-built node, kept alive by the traceback as in `spin_node`
    del raised
