"""wamdiff2_ros: WAM-Diff2 block-diffusion driving planner as a ROS 2 package.

Layers (imports point down only): nodes -> cli -> training/sim/eval -> decoding -> model.
Only ``wamdiff2_ros.nodes`` imports rclpy or message types; ``wamdiff2_ros.msg`` is generated
by the package's build step from ``msg/*.msg``.
"""

__version__ = "0.1.0"
