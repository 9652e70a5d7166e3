"""The ``wamdiff2`` command line: builds the parser from the verb modules and dispatches.

Each verb module exposes ``add_parser(subparsers)`` which registers its sub-parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code). Verb modules import
heavy dependencies (torch, rclpy) inside ``func`` so that ``wamdiff2 --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from wamdiff2_ros import __version__

# Order is the order of ``wamdiff2 --help``.
VERB_MODULES = (
    "wamdiff2_ros.cli.info",
    "wamdiff2_ros.cli.plan",
    "wamdiff2_ros.cli.train",
    "wamdiff2_ros.cli.sim",
    "wamdiff2_ros.cli.eval",
    "wamdiff2_ros.cli.bench",
    "wamdiff2_ros.cli.bag",
    "wamdiff2_ros.cli.demo",
    "wamdiff2_ros.cli.params",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wamdiff2",
        description=(
            "WAM-Diff2 block-diffusion driving planner: plan, benchmark, train, simulate, "
            "evaluate, replay bags, run the demo and print the node parameters."
        ),
        epilog="Run 'wamdiff2 VERB --help' for the options of one verb.",
    )
    parser.add_argument("--version", action="version", version=f"wamdiff2 {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name in VERB_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
