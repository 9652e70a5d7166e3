"""pip build of wamdiff2_ros: builds the messages (tools/build_interfaces.py), then ships the Python package,
the message libraries and the ROS resources (launch, config, ament index) under the environment prefix.

On a machine with ROS 2, build with colcon instead (CMakeLists.txt). Install with
``pip install --no-build-isolation .``: the message build uses the environment's ROS wheels.
"""

import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.dist import Distribution

PACKAGE = "wamdiff2_ros"
ROOT = Path(__file__).resolve().parent
STAGE = ROOT / "build" / "rosidl" / "stage"


class BinaryDistribution(Distribution):
    """The wheel carries compiled message libraries: give it a platform tag."""

    def has_ext_modules(self):
        return True


def data_files():
    """Everything tools/build_interfaces.py staged for the prefix: message libraries, headers, interface
    files, the ament index, launch and config files, and the node executables under lib/<package>/."""
    files = {}
    for path in sorted(STAGE.rglob("*")):
        if path.is_file():
            files.setdefault(str(path.parent.relative_to(STAGE)), []).append(str(path.relative_to(ROOT)))
    return sorted(files.items())


subprocess.run([sys.executable, str(ROOT / "tools" / "build_interfaces.py")], check=True)

setup(
    name=PACKAGE,
    version="0.1.0",
    description="WAM-Diff2 block-diffusion driving planner for ROS 2",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["*.so"]},
    data_files=data_files(),
    distclass=BinaryDistribution,
    zip_safe=False,
    entry_points={
        "console_scripts": [
            "wamdiff2 = wamdiff2_ros.cli.main:main",
            "wamdiff2-planner = wamdiff2_ros.nodes.planner:main",
            "wamdiff2-scorer = wamdiff2_ros.nodes.scorer:main",
        ],
    },
)
