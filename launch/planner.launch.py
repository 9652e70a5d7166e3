"""Start the WAM-Diff2 planner and the candidate scorer (and optionally rviz).

    ros2 launch wamdiff2_ros planner.launch.py [model:=/path/to/checkpoint] [preset:=tiny|2b|8b]
        [config:=default|carla] [device:=cpu|cuda] [use_sim_time:=true] [rviz:=true]

device:=cuda adds config/gpu.yaml after the config preset's file (bf16, the split-keys Triton attention or
FlashInfer or SDPA, CUDA graphs, torch.compile, a warm-up at start-up).

Which executables, parameter files and remappings: wamdiff2_ros/nodes/launch_spec.py (shared with the tests).
The large-data DDS transport profile is set for every node unless FASTDDS_DEFAULT_PROFILES_FILE or
FASTDDS_BUILTIN_TRANSPORTS is already set.
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from wamdiff2_ros.nodes.launch_spec import (
    CONFIG_PRESETS,
    DEVICES,
    PACKAGE,
    node_specs,
    rviz_plan,
    transport_environment,
)


def _nodes(context):
    share = Path(get_package_share_directory(PACKAGE))
    value = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    specs = node_specs(
        share,
        preset=value("config"),
        model=value("model"),
        model_preset=value("preset"),
        use_sim_time=value("use_sim_time").lower() == "true",
        device=value("device"),
    )
    return [
        Node(
            package=PACKAGE,
            executable=spec.executable,
            name=spec.name,
            parameters=[*map(str, spec.parameter_files), spec.parameters],
            remappings=list(spec.remappings),
            output="screen",
        )
        for spec in specs
    ]


def _rviz(context):
    start, message = rviz_plan(LaunchConfiguration("rviz").perform(context).lower() == "true")
    if not start:
        return [LogInfo(msg=message)] if message else []
    share = Path(get_package_share_directory(PACKAGE))
    return [
        Node(package="rviz2", executable="rviz2", arguments=["-d", str(share / "config" / "planner.rviz")])
    ]


def generate_launch_description() -> LaunchDescription:
    share = Path(get_package_share_directory(PACKAGE))
    transport = [SetEnvironmentVariable(k, v) for k, v in transport_environment(share).items()]
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "model",
                default_value="",
                description="Checkpoint folder (empty: the preset, else the bundled default model).",
            ),
            DeclareLaunchArgument(
                "preset", default_value="", description="Random-weight preset: tiny, 2b or 8b."
            ),
            DeclareLaunchArgument(
                "config",
                default_value="default",
                choices=list(CONFIG_PRESETS),
                description="Parameter preset.",
            ),
            DeclareLaunchArgument(
                "device",
                default_value="cpu",
                choices=list(DEVICES),
                description="cuda: add config/gpu.yaml (onboard GPU fast path) after the preset's file.",
            ),
            DeclareLaunchArgument("use_sim_time", default_value="false", description="Follow /clock."),
            DeclareLaunchArgument(
                "rviz", default_value="false", description="Start rviz2 with config/planner.rviz."
            ),
            *transport,
            OpaqueFunction(function=_nodes),
            OpaqueFunction(function=_rviz),
        ]
    )
