"""Fault injection over real processes: the planner and the scorer as the launch file wires them, fed like a
car's drivers feed them, while one of them is killed and restarted, odometry stops, the clock jumps, or the
checkpoint is corrupted or removed. For each: what is published, what /diagnostics says, and that the
stack recovers without a restart where it can. The CUDA out-of-memory fault needs the GPU: its test
(test/decoding/test_planner_memory.py, marker ``gpu``) forces one in the Planner, the node's inference call.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Point, Pose, PoseStamped
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as Path_
from ros_harness import Probe, node_output, start_node, stop_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from wamdiff2_ros.model.default import default_model_dir
from wamdiff2_ros.msg import CandidateTrajectories, PlannedTrajectory
from wamdiff2_ros.nodes.convert.images import numpy_to_image
from wamdiff2_ros.nodes.convert.route import path_from_points
from wamdiff2_ros.nodes.qos import RELIABLE
from wamdiff2_ros.nodes.qos import route as latched_route_qos

NS = "/faults"
PLANNER, SCORER = f"{NS}/wamdiff2_planner", f"{NS}/wamdiff2_scorer"
PLANNER_PARAMS = {
    "model.preset": "tiny",
    "decoder.steps": 4,
    "candidates.count": 2,
    "output.detections_every_n": 0,
    "qos.image_reliability": "reliable",
    "input.max_age_s": 60.0,  # the clock-jump test sends frames 30 s from now either way
    "diagnostics.period_s": 0.1,
    "diagnostics.missing_topic_s": 0.5,
    "diagnostics.no_plan_error_s": 1.0,
}
SCORER_REMAPS = {
    "~/input/candidates": f"{PLANNER}/output/candidates",
    "~/input/odometry": f"{PLANNER}/input/odometry",
    "~/input/detections": f"{PLANNER}/output/detections",
}
OUTPUTS = {
    f"{PLANNER}/output/trajectory": PlannedTrajectory,
    f"{SCORER}/output/scored": CandidateTrajectories,
    "/diagnostics": DiagnosticArray,
}


def start_planner(params: dict | None = None):
    return start_node("wamdiff2_ros.nodes.planner", NS, {**PLANNER_PARAMS, **(params or {})})


def start_scorer():
    return start_node("wamdiff2_ros.nodes.scorer", NS, {"diagnostics.period_s": 0.2}, SCORER_REMAPS)


def kill(process) -> None:
    """SIGKILL, as a crash or an OOM killer would end it: no clean shutdown."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class Car:
    """Camera frames and odometry at ~10 Hz, stamped ``offset_s`` from now (a clock jump is a new offset)."""

    def __init__(self, probe: Probe) -> None:
        node = probe.node
        self.probe = probe
        self.image = node.create_publisher(Image, f"{PLANNER}/input/image", RELIABLE)
        self.odometry = node.create_publisher(Odometry, f"{PLANNER}/input/odometry", RELIABLE)
        pixels = np.random.default_rng(5).integers(0, 256, size=(180, 320, 3), dtype=np.uint8)
        self.frame = numpy_to_image(pixels, "bgr8")
        self.offset_s, self.send_odometry, self.sent = 0.0, True, []
        self._last = 0.0

    def stamp(self) -> Time:
        now = self.probe.node.get_clock().now().nanoseconds + int(self.offset_s * 1e9)
        return Time(sec=now // 1_000_000_000, nanosec=now % 1_000_000_000)

    def drive(self) -> None:
        """Publish the next frame and state if 0.1 s have passed (called between spins)."""
        if time.monotonic() - self._last < 0.1:
            return
        self._last = time.monotonic()
        stamp = self.stamp()
        odometry = Odometry(header=Header(stamp=stamp, frame_id="map"), child_frame_id="ego_vehicle")
        odometry.twist.twist.linear.x = 5.0
        if self.send_odometry:
            self.odometry.publish(odometry)
        self.frame.header = Header(stamp=stamp, frame_id="camera_front")
        self.image.publish(self.frame)
        if self.send_odometry:
            self.odometry.publish(odometry)
        self.sent.append(stamp)


@pytest.fixture(scope="module")
def stack(ros_context):
    processes = {"planner": start_planner(), "scorer": start_scorer()}
    probe = Probe(ros_context, "faults_probe", OUTPUTS)
    car = Car(probe)
    yield processes, probe, car
    probe.close()
    for process in processes.values():
        stop_node(process)


def _arrivals(probe: Probe, topic: str) -> int:
    return len(probe.received[topic])


def until_more(stack, topic: str, count: int = 3, timeout_s: float = 60.0) -> bool:
    """Drive until ``count`` more messages arrived on ``topic`` (planner topics, or the scorer's)."""
    _, probe, car = stack
    start = _arrivals(probe, topic)
    return probe.spin_until(lambda: _arrivals(probe, topic) >= start + count, timeout_s, during=car.drive)


def planner_statuses(probe: Probe, since: int = 0) -> list[DiagnosticStatus]:
    return [s for a in probe.received["/diagnostics"][since:] for s in a.status if s.name == PLANNER]


def _well_formed(trajectories: list[PlannedTrajectory]) -> bool:
    return all(
        len(t.points) == 8 and all(math.isfinite(v) for p in t.points for v in (p.position.x, p.position.y))
        for t in trajectories
    )


TRAJECTORY, SCORED = f"{PLANNER}/output/trajectory", f"{SCORER}/output/scored"


@pytest.mark.ros
def test_scorer_killed_and_restarted_while_the_planner_plans(stack) -> None:
    processes, probe, _ = stack
    assert until_more(stack, SCORED), node_output(processes["scorer"]) + node_output(processes["planner"])
    kill(processes["scorer"])
    assert until_more(stack, TRAJECTORY), "the planner stopped when the scorer died"
    processes["scorer"] = start_scorer()
    assert until_more(stack, SCORED), "scoring did not resume:\n" + node_output(processes["scorer"])
    assert processes["planner"].poll() is None
    assert _well_formed(probe.received[TRAJECTORY])


@pytest.mark.ros
def test_planner_killed_and_restarted_while_inputs_stream(stack) -> None:
    processes, probe, car = stack
    assert until_more(stack, TRAJECTORY)
    kill(processes["planner"])
    scored = _arrivals(probe, SCORED)
    probe.spin_until(lambda: False, 1.0, during=car.drive)  # inputs go on while no planner runs
    assert processes["scorer"].poll() is None, "the scorer died with the planner"
    assert _arrivals(probe, SCORED) - scored <= 1  # at most one candidate set was in flight
    processes["planner"] = start_planner()
    assert until_more(stack, TRAJECTORY), "a new planner did not plan:\n" + node_output(processes["planner"])
    assert until_more(stack, SCORED), "the scorer did not score the new planner's candidates"
    assert _well_formed(probe.received[TRAJECTORY])


@pytest.mark.ros
def test_odometry_lost_is_diagnosed_and_planning_resumes_when_it_returns(stack) -> None:
    processes, probe, car = stack
    assert until_more(stack, TRAJECTORY)
    seen = len(probe.received["/diagnostics"])
    car.send_odometry = False
    try:

        def diagnosed() -> bool:
            statuses = planner_statuses(probe, seen)
            missing = any("missing_odometry" in s.message for s in statuses)
            return missing and any(s.level == DiagnosticStatus.ERROR for s in statuses)

        assert probe.spin_until(diagnosed, 20, during=car.drive), [
            s.message for s in planner_statuses(probe, seen)
        ]
        error = next(s for s in planner_statuses(probe, seen) if s.level == DiagnosticStatus.ERROR)
        assert "no model plan for" in error.message
    finally:
        car.send_odometry = True
    back = len(probe.received["/diagnostics"])
    assert until_more(stack, TRAJECTORY), node_output(processes["planner"])
    assert probe.spin_until(
        lambda: any(s.level == DiagnosticStatus.OK for s in planner_statuses(probe, back)),
        10,
        during=car.drive,
    )


@pytest.mark.ros
def test_clock_jumping_back_and_forward_keeps_planning_on_the_new_time(stack) -> None:
    """A looping bag jumps back; a simulator resumed after a pause jumps forward. Plans follow the stamps."""
    processes, probe, car = stack
    seen = len(probe.received["/diagnostics"])
    try:
        for offset_s in (0.0, -30.0, 30.0, 0.0):
            car.offset_s = offset_s
            first = len(car.sent)

            def planned_on_this_time(first: int = first) -> bool:
                stamps = {(s.sec, s.nanosec) for s in car.sent[first:]}
                return any(
                    (t.header.stamp.sec, t.header.stamp.nanosec) in stamps for t in probe.received[TRAJECTORY]
                )

            assert probe.spin_until(planned_on_this_time, 30, during=car.drive), (
                offset_s,
                node_output(processes["planner"]),
            )
    finally:
        car.offset_s = 0.0
    jumps = [s for s in planner_statuses(probe, seen) if "time_jump" in s.message]
    assert jumps, "the backward jumps were not diagnosed"
    assert processes["planner"].poll() is None
    assert _well_formed(probe.received[TRAJECTORY])


def _model_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(default_model_dir(), folder)
    return folder


def _status_values(probe: Probe, node: str) -> dict[str, str]:
    for array in reversed(probe.received["/diagnostics"]):
        for status in array.status:
            if status.name == node:
                return {kv.key: kv.value for kv in status.values} | {"_message": status.message}
    return {}


def _cut_weights_short(folder: Path) -> None:  # as a failed copy
    weights = next(folder.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])


def _driver(probe: Probe, node: str, frame_id: str = "", position: tuple[float, float] = (0.0, 0.0)):
    """A call for ``spin_until``'s ``during``: a frame between two odometry messages (at ``position`` in
    ``frame_id``) every 0.2 s, to the planner ``node``."""
    image = probe.node.create_publisher(Image, f"{node}/input/image", RELIABLE)
    odometry = probe.node.create_publisher(Odometry, f"{node}/input/odometry", RELIABLE)
    frame = numpy_to_image(np.full((180, 320, 3), 90, np.uint8), "bgr8")
    last = [0.0]

    def drive() -> None:
        if time.monotonic() - last[0] > 0.2:
            last[0] = time.monotonic()
            stamp = probe.node.get_clock().now().to_msg()
            state = Odometry(header=Header(stamp=stamp, frame_id=frame_id))
            state.pose.pose.position.x, state.pose.pose.position.y = position
            odometry.publish(state)
            frame.header = Header(stamp=stamp)
            image.publish(frame)
            odometry.publish(state)

    return drive


@pytest.mark.ros
def test_an_unusable_checkpoint_is_an_error_diagnostic_not_a_crash(ros_context, tmp_path: Path) -> None:
    folder = _model_copy(tmp_path)
    _cut_weights_short(folder)
    namespace = "/faults_corrupt"
    process = start_node(
        "wamdiff2_ros.nodes.planner",
        namespace,
        {**PLANNER_PARAMS, "model.preset": "", "model.checkpoint": str(folder)},
    )
    probe = Probe(ros_context, "corrupt_probe", {"/diagnostics": DiagnosticArray})
    node = f"{namespace}/wamdiff2_planner"
    try:
        assert probe.spin_until(lambda: _status_values(probe, node).get("model_state") == "error", 60), (
            node_output(process)
        )
        values = _status_values(probe, node)
        assert "model failed to load" in values["_message"], values
        assert process.poll() is None  # up, and saying why it cannot plan
    finally:
        probe.close()
        stop_node(process)


@pytest.mark.ros
@pytest.mark.parametrize(
    ("model", "told"),
    [
        ("route_model", "reads the route on ~/input/route"),
        ("route_plan_model", "plans along the route on ~/input/route"),
    ],
)
def test_a_route_model_plans_on_the_route_it_is_given_and_falls_back_without_one(
    ros_context, request, model: str, told: str
) -> None:
    """A ``branch_route`` model (every prompt it learnt from had the route's shape), or one that writes
    its plans along the route, plans once a route arrives on ~/input/route (latched, as the CARLA bridge's
    waypoints), and falls back again once an empty path withdraws it (the bridge's "no goal"); without a
    route each frame gets the fallback, and /diagnostics says why. (A route latched before the node
    subscribes: test_bag_io's latched replay.)"""
    folder = request.getfixturevalue(model)
    namespace = f"/faults_{model}"
    node = f"{namespace}/wamdiff2_planner"
    params = {**PLANNER_PARAMS, "model.preset": "", "model.checkpoint": str(folder), "candidates.count": 1}
    process = start_node("wamdiff2_ros.nodes.planner", namespace, params)
    topic = f"{node}/output/trajectory"
    probe = Probe(ros_context, "route_probe", {topic: PlannedTrajectory, "/diagnostics": DiagnosticArray})
    try:
        assert probe.spin_until(lambda: _status_values(probe, node).get("model_state") == "ready", 60), (
            node_output(process)
        )
        assert told in _status_values(probe, node)["model"]
        drive = _driver(probe, node, "map", (100.0, 50.0))

        def published(status: int) -> bool:
            return any(t.status == status for t in probe.received[topic])

        assert probe.spin_until(lambda: published(PlannedTrajectory.STATUS_FALLBACK), 60, during=drive)
        reasons = [t.status_reason for t in probe.received[topic]]
        assert any("no route on ~/input/route" in r for r in reasons), reasons

        def diagnosed(what: str) -> bool:
            return what in _status_values(probe, node).get("last_problem.route", "")

        assert probe.spin_until(lambda: diagnosed("no route on"), 10, during=drive), _status_values(
            probe, node
        )
        route = Path_(header=Header(frame_id="map"))
        for x in np.arange(90.0, 200.0, 2.0):  # a road east through the ego, then a right turn
            route.poses.append(PoseStamped(pose=Pose(position=Point(x=float(x), y=50.0))))
        route.poses += [PoseStamped(pose=Pose(position=Point(x=198.0, y=50.0 - y))) for y in (2.0, 4.0)]
        routes = probe.node.create_publisher(Path_, f"{node}/input/route", latched_route_qos())
        routes.publish(route)
        ok = probe.spin_until(lambda: published(PlannedTrajectory.STATUS_OK), 60, during=drive)
        assert ok, [t.status_reason for t in probe.received[topic]]
        seen = len(probe.received[topic])
        routes.publish(Path_(header=Header(frame_id="map")))  # withdrawn

        def fell_back_again() -> bool:
            return any(t.status == PlannedTrajectory.STATUS_FALLBACK for t in probe.received[topic][seen:])

        assert probe.spin_until(fell_back_again, 60, during=drive)
        assert probe.spin_until(lambda: diagnosed("withdrawn"), 10, during=drive), _status_values(probe, node)
    finally:
        probe.close()
        stop_node(process)


@pytest.mark.ros
def test_checkpoint_removed_after_loading_keeps_planning(ros_context, tmp_path: Path) -> None:
    folder = _model_copy(tmp_path)
    namespace = "/faults_removed"
    node = f"{namespace}/wamdiff2_planner"
    process = start_node(
        "wamdiff2_ros.nodes.planner",
        namespace,
        {**PLANNER_PARAMS, "model.preset": "", "model.checkpoint": str(folder), "candidates.count": 1},
    )
    outputs = {f"{node}/output/trajectory": PlannedTrajectory, "/diagnostics": DiagnosticArray}
    probe = Probe(ros_context, "removed_probe", outputs)
    try:
        assert probe.spin_until(lambda: _status_values(probe, node).get("model_state") == "ready", 60), (
            node_output(process)
        )
        shutil.rmtree(folder)  # the weights are in memory: nothing reads the folder again
        drive = _driver(probe, node, "map")
        ahead = np.arange(-10.0, 200.0, 2.0)  # a straight road through the ego: a route model's route
        routes = probe.node.create_publisher(Path_, f"{node}/input/route", latched_route_qos())
        routes.publish(path_from_points("map", np.stack([ahead, np.zeros_like(ahead)], axis=1)))

        topic = f"{node}/output/trajectory"
        assert probe.spin_until(
            lambda: any(t.status == PlannedTrajectory.STATUS_OK for t in probe.received[topic]),
            60,
            during=drive,
        ), node_output(process)
    finally:
        probe.close()
        stop_node(process)


@pytest.mark.ros
def test_parameter_services_answer_while_the_planner_plans(stack) -> None:
    """``ros2 param get`` during planning: the executor thread serves parameter requests while the worker
    thread runs the model (it only checks frames; conversion and inference are the worker's)."""
    from rcl_interfaces.srv import GetParameters

    _, probe, car = stack
    client = probe.node.create_client(GetParameters, f"{PLANNER}/get_parameters")
    assert probe.spin_until(client.service_is_ready, 20, during=car.drive)
    plans = _arrivals(probe, TRAJECTORY)
    answered = []
    deadline = time.monotonic() + 60.0  # calls go on until the planner has planned 3 more frames meanwhile
    while time.monotonic() < deadline and (len(answered) < 20 or _arrivals(probe, TRAJECTORY) < plans + 3):
        future = client.call_async(GetParameters.Request(names=["decoder.steps", "model.preset"]))
        assert probe.spin_until(future.done, 5, during=car.drive), "no answer while planning"
        steps, preset = future.result().values
        answered.append((steps.integer_value, preset.string_value))
    assert answered == [(4, "tiny")] * len(answered)
    assert _arrivals(probe, TRAJECTORY) >= plans + 3, [s.message for s in planner_statuses(probe)[-3:]]
    probe.node.destroy_client(client)
