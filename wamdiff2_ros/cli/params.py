"""``wamdiff2 params``: the nodes' parameters as a ROS 2 parameter file, rendered from their tables.

``wamdiff2 params > config/planner.yaml`` regenerates the deployment defaults (names, defaults, and the
comments with each parameter's description and allowed values); ``--node`` prints one node's section.
"""

from __future__ import annotations

import argparse

# The keys of nodes.params.NODES (a test checks it), named here so that building the parser imports nothing
# of the package: the tables import the decoding package.
NODE_CHOICES = ("planner", "scorer")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "params",
        help="print the nodes' parameters (defaults, descriptions, ranges) as a ROS 2 parameter file",
        description="Print the planner and scorer parameters, rendered from the tables in "
        "wamdiff2_ros/nodes/params.py, as the ROS 2 parameter file config/planner.yaml holds them: "
        "each parameter with its default under a comment of its description and allowed values.",
    )
    parser.add_argument(
        "--node",
        choices=NODE_CHOICES,
        help="print only this node's section (default: the whole file, both nodes)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wamdiff2_ros.nodes.params import render_node_yaml, render_parameter_file

    print(render_node_yaml(args.node) if args.node else render_parameter_file(), end="")
    return 0
