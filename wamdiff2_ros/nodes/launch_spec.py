"""What ``launch/planner.launch.py`` starts, as plain data: executables, names, parameter files, remappings.

The launch file turns these specs into launch_ros ``Node`` actions; tests start the very same executables
with the same arguments as processes (launch itself is not installable here), so both stay in step.
Config presets: ``default`` (generic topics) and ``carla`` (the CARLA ROS bridge, role ``ego_vehicle``);
devices: ``cpu`` (planner.yaml's) and ``cuda`` (config/gpu.yaml on top of the preset).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from wamdiff2_ros.nodes.params import PLANNER_PARAMS, read_parameter_file

PACKAGE = "wamdiff2_ros"
CONFIG_PRESETS = ("default", "carla")
DEVICES = ("cpu", "cuda")
TRANSPORT_PROFILE = "fastdds_local_large_data.xml"

# External topic names per preset: planner and scorer inputs are remapped onto them.
TOPICS = {
    "default": {
        "image": "/camera/front/image_raw",
        "compressed": "/camera/front/image_raw/compressed",
        "camera_info": "/camera/front/camera_info",
        "odometry": "/odometry",
        "imu": "/imu",
        "command": "/driving_command",
        "route": "/route",
    },
    "carla": {
        "image": "/carla/ego_vehicle/rgb_front/image",
        "compressed": "/carla/ego_vehicle/rgb_front/image/compressed",
        "camera_info": "/carla/ego_vehicle/rgb_front/camera_info",
        "odometry": "/carla/ego_vehicle/odometry",
        "imu": "/carla/ego_vehicle/imu",
        "command": "/carla/ego_vehicle/driving_command",
        "route": "/carla/ego_vehicle/waypoints",  # the bridge's global plan (latched)
    },
}


@dataclass(frozen=True)
class NodeSpec:
    executable: str  # in lib/wamdiff2_ros/
    name: str
    parameter_files: tuple[Path, ...]
    parameters: dict = field(default_factory=dict)  # overrides, applied after the files
    remappings: tuple[tuple[str, str], ...] = ()


def share_dir() -> Path:
    """The installed share directory (pip or colcon install), else the source tree."""
    installed = Path(sys.prefix) / "share" / PACKAGE
    return (
        installed
        if (installed / "config" / "planner.yaml").is_file()
        else Path(__file__).resolve().parents[2]
    )


def config_files(share_dir: Path, preset: str, device: str = "cpu") -> tuple[Path, ...]:
    """planner.yaml, then the preset's overrides, then gpu.yaml for ``device`` cuda (later files win)."""
    if preset not in CONFIG_PRESETS:
        raise ValueError(f"config preset must be one of {CONFIG_PRESETS}, got {preset!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    files = [share_dir / "config" / "planner.yaml"]
    if preset != "default":
        files.append(share_dir / "config" / f"{preset}.yaml")
    if device == "cuda":
        files.append(share_dir / "config" / "gpu.yaml")
    return tuple(files)


def node_specs(
    share_dir: Path,
    *,
    preset: str = "default",
    model: str = "",
    model_preset: str = "",
    use_sim_time: bool = False,
    device: str = "cpu",
) -> list[NodeSpec]:
    """Planner and scorer as the launch file starts them.

    Args:
        share_dir: the package's share directory (holds config/).
        preset: config preset (``CONFIG_PRESETS``).
        model: checkpoint folder; empty keeps the YAML's ``model.checkpoint``.
        model_preset: random-weight model preset; empty keeps the YAML's ``model.preset``.
        use_sim_time: follow /clock (bag replay with --clock, CARLA).
        device: ``cpu`` or ``cuda`` (adds config/gpu.yaml after the preset's file; the preset's own
            ``warmup.image_size``, its camera's frame size, still wins over gpu.yaml's).
    """
    files = config_files(share_dir, preset, device)
    topics = TOPICS[preset]
    common = {"use_sim_time": use_sim_time}
    planner_overrides = dict(common)
    if device == "cuda" and preset != "default":
        camera = _preset_warmup_size(files[1])
        if camera:
            planner_overrides["warmup.image_size"] = camera
    if model:
        planner_overrides["model.checkpoint"] = model
    if model_preset:
        planner_overrides["model.preset"] = model_preset
    planner = "~/input/"
    return [
        NodeSpec(
            "planner_node",
            "wamdiff2_planner",
            files,
            planner_overrides,
            (
                (f"{planner}image", topics["image"]),
                (f"{planner}image/compressed", topics["compressed"]),
                (f"{planner}odometry", topics["odometry"]),
                (f"{planner}imu", topics["imu"]),
                (f"{planner}command", topics["command"]),
                (f"{planner}route", topics["route"]),
            ),
        ),
        NodeSpec(
            "scorer_node",
            "wamdiff2_scorer",
            files,
            dict(common),
            (
                ("~/input/candidates", "/wamdiff2_planner/output/candidates"),
                ("~/input/detections", "/wamdiff2_planner/output/detections"),
                ("~/input/camera_info", topics["camera_info"]),
                ("~/input/odometry", topics["odometry"]),
            ),
        ),
    ]


def _preset_warmup_size(preset_file: Path) -> str:
    return read_parameter_file(preset_file, "wamdiff2_planner", PLANNER_PARAMS).get("warmup.image_size", "")


def transport_environment(share_dir: Path, environ: dict | None = None) -> dict[str, str]:
    """The large-data DDS transport for every node, unless the user already chose a transport."""
    environ = os.environ if environ is None else environ
    if "FASTDDS_DEFAULT_PROFILES_FILE" in environ or "FASTDDS_BUILTIN_TRANSPORTS" in environ:
        return {}
    return {"FASTDDS_DEFAULT_PROFILES_FILE": str(share_dir / "config" / TRANSPORT_PROFILE)}


def ros_arguments(spec: NodeSpec) -> list[str]:
    """The ``--ros-args`` a launch_ros Node with this spec passes to its process."""
    arguments = ["--ros-args", "-r", f"__node:={spec.name}"]
    for parameter_file in spec.parameter_files:
        arguments += ["--params-file", str(parameter_file)]
    for name, value in spec.parameters.items():
        rendered = str(value).lower() if isinstance(value, bool) else str(value)
        arguments += ["-p", f"{name}:={rendered}"]
    for source, target in spec.remappings:
        arguments += ["-r", f"{source}:={target}"]
    return arguments


def command_line(spec: NodeSpec, overrides: dict | None = None) -> list[str]:
    """The process launch_ros starts for ``spec`` (its executable in ``<prefix>/lib/<package>/``), with
    ``overrides`` applied after the spec's parameters."""
    arguments = ros_arguments(spec)
    for name, value in (overrides or {}).items():
        rendered = str(value).lower() if isinstance(value, bool) else str(value)
        arguments += ["-p", f"{name}:={rendered}"]
    return [str(Path(sys.prefix) / "lib" / PACKAGE / spec.executable), *arguments]


def rviz_plan(requested: bool, installed: bool | None = None) -> tuple[bool, str]:
    """Whether the launch file starts rviz2, and what it says about it.

    A pip install has no rviz2: ``rviz:=true`` there must not fail the launch after the nodes are up (launch
    then leaves them running as orphans), so the nodes start alone and the launch says why.

    Args:
        requested: the ``rviz`` launch argument.
        installed: whether the ament index knows rviz2; None: look it up.
    """
    if not requested:
        return False, ""
    if installed is None:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix

        try:
            get_package_prefix("rviz2")
            installed = True
        except (PackageNotFoundError, OSError):  # OSError: no AMENT_PREFIX_PATH at all
            installed = False
    if installed:
        return True, ""
    return False, (
        "rviz:=true, but rviz2 is not installed (no 'rviz2' in the ament index): the planner and scorer "
        "run without it; install it (e.g. apt install ros-$ROS_DISTRO-rviz2) or open config/planner.rviz "
        "elsewhere"
    )
