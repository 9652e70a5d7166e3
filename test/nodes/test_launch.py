"""planner.launch.py's nodes, started exactly as the launch file starts them (launch itself is not installable
here): the installed executables under lib/wamdiff2_ros/, the YAML parameter files, the remappings."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
from nav_msgs.msg import Odometry
from rcl_interfaces.srv import GetParameters
from ros_harness import Probe, node_output, start_process, stop_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from wamdiff2_ros.msg import CandidateTrajectories, PlannedTrajectory
from wamdiff2_ros.nodes.convert.images import numpy_to_image
from wamdiff2_ros.nodes.launch_spec import (
    TOPICS,
    command_line,
    node_specs,
    ros_arguments,
    rviz_plan,
    transport_environment,
)
from wamdiff2_ros.nodes.qos import RELIABLE

REPO = Path(__file__).resolve().parents[2]


def start(spec, extra_parameters: dict | None = None) -> subprocess.Popen:
    """As launch_ros does: the executable from lib/<package>/ with the spec's --ros-args."""
    return start_process(command_line(spec, extra_parameters))


def get_parameters(probe: Probe, node: str, names: list[str]) -> list:
    client = probe.node.create_client(GetParameters, f"/{node}/get_parameters")
    assert probe.spin_until(lambda: client.service_is_ready(), 30), f"{node} offers no parameter service"
    future = client.call_async(GetParameters.Request(names=names))
    # The planner loads its model in a thread while it spins; on a busy 2-core machine that thread can hold
    # the GIL long enough to delay the first answer past 10 s (seen once in CI).
    assert probe.spin_until(future.done, 60), f"{node} did not answer get_parameters within 60 s"
    return future.result().values


@pytest.fixture
def launched(ros_context, request):
    preset = request.param
    specs = node_specs(REPO, preset=preset, model_preset="tiny")
    fast = {"decoder.steps": 4, "candidates.count": 2, "input.max_age_s": 30.0, "diagnostics.period_s": 0.5}
    if preset == "carla":
        fast["decoder.backend"] = "eager"  # the reference forward (transformers) serves the node too
    processes = [start(specs[0], fast), start(specs[1])]
    probe = Probe(
        ros_context,
        f"launch_probe_{preset}",
        {
            "/wamdiff2_planner/output/trajectory": PlannedTrajectory,
            "/wamdiff2_scorer/output/scored": CandidateTrajectories,
        },
    )
    yield preset, processes, probe
    probe.close()
    for process in processes:
        stop_node(process)


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.parametrize("launched", ["default", "carla"], indirect=True)
def test_launched_nodes_read_the_yaml_and_plan_through_the_scorer(launched) -> None:
    preset, (planner, scorer), probe = launched
    values = get_parameters(
        probe, "wamdiff2_planner", ["decoder.block_size", "output.frame_id", "model.preset"]
    )
    frame_id = "ego_vehicle" if preset == "carla" else "base_link"
    assert [values[0].integer_value, values[1].string_value, values[2].string_value] == [32, frame_id, "tiny"]
    fov = get_parameters(probe, "wamdiff2_scorer", ["camera.horizontal_fov_deg"])[0].double_value
    assert fov == (90.0 if preset == "carla" else 64.0)

    topics = TOPICS[preset]
    image_pub = probe.node.create_publisher(Image, topics["image"], RELIABLE)
    odometry_pub = probe.node.create_publisher(Odometry, topics["odometry"], RELIABLE)
    encoding = "bgra8" if preset == "carla" else "bgr8"  # the CARLA bridge sends bgra8
    frame = np.zeros((120, 160, 4 if encoding == "bgra8" else 3), np.uint8)

    def stream():
        stamp = probe.node.get_clock().now().to_msg()
        odometry = Odometry(header=Header(stamp=stamp, frame_id="map"))
        odometry.twist.twist.linear.x = 4.0
        odometry_pub.publish(odometry)
        image_pub.publish(numpy_to_image(frame, encoding, Header(stamp=stamp, frame_id="camera")))
        odometry_pub.publish(odometry)

    def planned_and_scored() -> bool:
        return bool(probe.received["/wamdiff2_scorer/output/scored"])

    arrived = probe.spin_until(planned_and_scored, 90, during=stream)
    assert arrived, f"planner:\n{node_output(planner)}\nscorer:\n{node_output(scorer)}"
    scored = probe.received["/wamdiff2_scorer/output/scored"][-1]
    assert scored.header.frame_id == frame_id and len(scored.scores) == len(scored.candidates) >= 1
    assert 0 <= scored.selected_index < len(scored.candidates)


def test_transport_profile_is_set_unless_the_user_chose_one() -> None:
    profile = transport_environment(REPO, {})
    assert Path(profile["FASTDDS_DEFAULT_PROFILES_FILE"]).is_file()
    assert transport_environment(REPO, {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"}) == {}
    assert transport_environment(REPO, {"FASTDDS_DEFAULT_PROFILES_FILE": "/mine.xml"}) == {}


def test_unknown_config_preset_is_rejected() -> None:
    with pytest.raises(ValueError, match="config preset must be one of"):
        node_specs(REPO, preset="autoware")
    with pytest.raises(ValueError, match="device must be one of"):
        node_specs(REPO, device="tpu")


@pytest.mark.parametrize("preset", ["default", "carla"])
def test_device_cuda_layers_gpu_yaml_after_the_preset(preset: str) -> None:
    cpu, cuda = (node_specs(REPO, preset=preset, device=device) for device in ("cpu", "cuda"))
    preset_files = ["planner.yaml"] + ([] if preset == "default" else [f"{preset}.yaml"])
    for on_cpu, on_cuda in zip(cpu, cuda, strict=True):  # planner and scorer
        assert [p.name for p in on_cpu.parameter_files] == preset_files
        assert [p.name for p in on_cuda.parameter_files] == [*preset_files, "gpu.yaml"]
        assert all(p.is_file() for p in on_cuda.parameter_files)
        assert on_cuda.remappings == on_cpu.remappings
    # The preset's camera frame size (carla.yaml's 800x600) stays the warm-up size over gpu.yaml's 1920x1080.
    assert cuda[0].parameters.get("warmup.image_size") == ("800x600" if preset == "carla" else None)
    assert "warmup.image_size" not in cpu[0].parameters


@pytest.mark.skipif(
    importlib.util.find_spec("launch_ros") is None, reason="launch_ros is not installable here"
)
def test_launch_file_builds_a_description() -> None:  # pragma: no cover - runs only where ROS launch exists
    spec = importlib.util.spec_from_file_location("planner_launch", REPO / "launch" / "planner.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.generate_launch_description().entities


def _readme_commands() -> dict[str, list[str]]:
    """The README's "without ROS launch" commands, by executable, as argument lists."""
    text = (Path(__file__).parents[2] / "README.md").read_text()
    joined = text.replace("\\\n", " ")
    commands = {}
    for line in joined.splitlines():
        words = shlex.split(line.split("#")[0]) if ".venv/bin/wamdiff2-" in line else []
        if words and words[0].startswith(".venv/bin/wamdiff2-") and "--ros-args" in words:
            commands[words[0].removeprefix(".venv/bin/wamdiff2-")] = words[1:]
    return commands


def test_readme_runs_the_nodes_as_the_launch_file_does_for_carla() -> None:
    # The command a pip user copies must carry what launch would: carla.yaml, sim time, every remap.
    commands = _readme_commands()
    specs = {
        spec.name.removeprefix("wamdiff2_"): spec
        for spec in node_specs(Path("."), preset="carla", use_sim_time=True)
    }
    assert set(commands) == set(specs) == {"planner", "scorer"}
    for name, spec in specs.items():
        assert commands[name] == ros_arguments(spec), name


def test_rviz_is_started_only_where_it_is_installed() -> None:
    assert rviz_plan(False) == (False, "")
    assert rviz_plan(True, installed=True) == (True, "")
    start, message = rviz_plan(True, installed=False)
    assert not start and "rviz2 is not installed" in message and "run without it" in message
    assert rviz_plan(True)[0] is False  # this machine (pip wheels) has no rviz2: the nodes start alone
