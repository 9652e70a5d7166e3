"""The ROS-native build (CMakeLists.txt, rosidl_generate_interfaces) against the PyPI ROS wheels.

The package is copied into a colcon-style workspace (``ws/src/wamdiff2_ros``), configured, built and
installed with CMake into a prefix of its own, exactly as ``colcon build`` would drive it. Its messages
must have the pip build's type hashes and exchange messages with it over DDS.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import rclpy
from message_samples import SAMPLES
from rclpy.serialization import deserialize_message

from wamdiff2_ros.msg import CandidateTrajectories

REPO = Path(__file__).resolve().parents[2]
PREFIX = Path(sys.prefix)
MESSAGES = sorted(p.stem for p in (REPO / "msg").glob("*.msg"))
CMAKE = shutil.which("cmake", path=f"{PREFIX / 'bin'}:{os.environ.get('PATH', '')}")  # requirements/cmake.txt


def _copy_sources(destination: Path) -> None:
    """Copy the files a clone would have (tracked or not ignored), never generated or build outputs."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


@pytest.fixture(scope="module")
def cmake_install(tmp_path_factory) -> Path:
    assert CMAKE, "cmake not found: tools/bootstrap.sh installs it from requirements/cmake.txt"
    workspace = tmp_path_factory.mktemp("colcon_ws")
    source, build, install = workspace / "src" / "wamdiff2_ros", workspace / "build", workspace / "install"
    _copy_sources(source)
    env = {**os.environ, "AMENT_PREFIX_PATH": str(PREFIX), "PATH": f"{PREFIX / 'bin'}:{os.environ['PATH']}"}
    steps = [
        [CMAKE, "-S", str(source), "-B", str(build), f"-DCMAKE_PREFIX_PATH={PREFIX}",
         f"-DCMAKE_INSTALL_PREFIX={install}", f"-DPython3_EXECUTABLE={sys.executable}",
         "-DBUILD_TESTING=OFF"],
        [CMAKE, "--build", str(build), "-j2"],
        [CMAKE, "--install", str(build)],
    ]  # fmt: skip
    for step in steps:
        result = subprocess.run(step, env=env, capture_output=True, text=True)
        assert result.returncode == 0, (
            f"{' '.join(step[:3])} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return install


def _type_hash(share: Path, name: str) -> str:
    description = json.loads((share / "wamdiff2_ros" / "msg" / f"{name}.json").read_text())
    return description["type_hashes"][0]["hash_string"]


@pytest.mark.ros
@pytest.mark.slow
def test_cmake_build_installs_package_beside_its_messages(cmake_install: Path) -> None:
    site = (
        cmake_install / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )
    assert (site / "wamdiff2_ros" / "msg" / "_planned_trajectory.py").is_file()
    assert (
        "__version__" in (site / "wamdiff2_ros" / "__init__.py").read_text()
    )  # ours, not rosidl's empty one
    assert (
        cmake_install / "share" / "ament_index" / "resource_index" / "packages" / "wamdiff2_ros"
    ).is_file()
    assert (cmake_install / "lib" / "libwamdiff2_ros__rosidl_typesupport_cpp.so").is_file()  # C++ users too


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.parametrize("name", MESSAGES)
def test_cmake_and_pip_builds_have_the_same_type_hash(cmake_install: Path, name: str) -> None:
    assert _type_hash(cmake_install / "share", name) == _type_hash(PREFIX / "share", name)


@pytest.mark.ros
@pytest.mark.slow
def test_cmake_built_subscriber_receives_from_pip_built_publisher(cmake_install: Path, dds_exchange) -> None:
    site = (
        cmake_install / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )
    wheel_libraries = sorted(Path(rclpy.__file__).parents[1].glob("ros_*.libs"))  # what the bootstrapper adds
    library_path = [str(cmake_install / "lib"), str(PREFIX / "lib"), *map(str, wheel_libraries)]
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        # Skip the ROS wheels' re-exec (it would reorder the library path); CMake's libraries come first.
        "_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1",
        "LD_LIBRARY_PATH": ":".join(library_path),
    }
    message = SAMPLES["CandidateTrajectories"]
    received = dds_exchange({"/test_cmake_interop/candidates": message}, env=env)
    assert received.loaded["python"].startswith(str(cmake_install))
    assert received.loaded["libraries"] and all(
        p.startswith(str(cmake_install)) for p in received.loaded["libraries"]
    )
    assert (
        deserialize_message(received.raw["/test_cmake_interop/candidates"], CandidateTrajectories) == message
    )
