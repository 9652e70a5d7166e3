"""The pip route as a user runs it: ``pip wheel`` of a clean source tree ships the package, its compiled
messages and everything ``ros2 launch`` / ``ros2 run`` look up under the prefix."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> set[str]:
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheels")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "-q",
        str(source),
        "-w",
    ]
    result = subprocess.run([*command, str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("wamdiff2_ros-*.whl")
    assert wheel.name.endswith("linux_x86_64.whl")  # a platform wheel: it carries compiled libraries
    return set(zipfile.ZipFile(wheel).namelist())


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry",
    [
        "wamdiff2_ros/msg/_planned_trajectory.py",
        "wamdiff2_ros/wamdiff2_ros_s__rosidl_typesupport_c.so",
        "wamdiff2_ros/nodes/planner.py",
        "wamdiff2_ros-0.1.0.data/data/lib/libwamdiff2_ros__rosidl_typesupport_fastrtps_c.so",
        "wamdiff2_ros-0.1.0.data/data/lib/wamdiff2_ros/planner_node",
        "wamdiff2_ros-0.1.0.data/data/lib/wamdiff2_ros/scorer_node",
        "wamdiff2_ros-0.1.0.data/data/share/wamdiff2_ros/launch/planner.launch.py",
        "wamdiff2_ros-0.1.0.data/data/share/wamdiff2_ros/config/planner.yaml",
        "wamdiff2_ros-0.1.0.data/data/share/wamdiff2_ros/models/default/model.safetensors",
        "wamdiff2_ros-0.1.0.data/data/share/wamdiff2_ros/msg/PlannedTrajectory.idl",
        "wamdiff2_ros-0.1.0.data/data/share/wamdiff2_ros/package.xml",
        "wamdiff2_ros-0.1.0.data/data/share/ament_index/resource_index/packages/wamdiff2_ros",
        "wamdiff2_ros-0.1.0.data/data/share/ament_index/resource_index/rosidl_interfaces/wamdiff2_ros",
        "wamdiff2_ros-0.1.0.data/data/include/wamdiff2_ros/wamdiff2_ros/msg/planned_trajectory.h",
    ],
)
def test_wheel_ships(wheel_files: set[str], entry: str) -> None:
    assert entry in wheel_files
