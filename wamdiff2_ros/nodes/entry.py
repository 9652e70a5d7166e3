"""The executable entry of a node: init, spin until Ctrl-C or shutdown, clean up (ros2/examples' pattern)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node


def spin_node(make_node: Callable[[], Node], args: list[str] | None = None) -> int:
    """Create the node, spin it, destroy it; a clean exit on SIGINT or an external shutdown.

    Returns:
        The process exit status (0).
    """
    try:
        with rclpy.init(args=args if args is not None else sys.argv):
            node = make_node()
            try:
                rclpy.spin(node)
            finally:
                node.destroy_node()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    return 0
