"""The layer rule of docs/DESIGN.md: only wamdiff2_ros.nodes imports rclpy or ROS message types."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "wamdiff2_ros"
ROS_MODULES = ("rclpy", "rosidl_runtime_py", "wamdiff2_ros.msg")
ROS_SUFFIXES = ("_msgs", "_interfaces")  # std_msgs, sensor_msgs, builtin_interfaces, ...


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def is_ros(module: str) -> bool:
    top = module.split(".")[0]
    return module.startswith(ROS_MODULES) or top.endswith(ROS_SUFFIXES)


NON_ROS_FILES = sorted(
    p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in ("nodes", "msg")
)


@pytest.mark.parametrize("path", NON_ROS_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_outside_nodes_imports_no_ros(path: Path) -> None:
    offending = sorted(m for m in imported_modules(path) if is_ros(m))
    assert not offending, f"{path.relative_to(PACKAGE)} imports {offending}; only wamdiff2_ros.nodes may"


def test_the_rule_detects_ros_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import rclpy\nfrom sensor_msgs.msg import Image\nfrom wamdiff2_ros.msg import X\nimport numpy\n"
    )
    assert sorted(m for m in imported_modules(sample) if is_ros(m)) == [
        "rclpy",
        "sensor_msgs.msg",
        "wamdiff2_ros.msg",
    ]
