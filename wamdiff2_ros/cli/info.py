"""``wamdiff2 info``: what is installed and which message types this build provides (with type hashes)."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

from wamdiff2_ros import __version__

DISTRIBUTIONS = ("torch", "transformers", "numpy", "opencv-python-headless", "rosbags", "ros-rclpy")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "info",
        help="show versions, the message types of this build and their type hashes",
        description="Print the package version, key dependency versions and the RIHS01 type hash of every "
        "custom message as installed in this environment (compare them across machines or builds).",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def message_type_hashes(prefix: Path = Path(sys.prefix)) -> dict[str, str]:
    """Type name -> RIHS01 hash of every message installed under ``prefix/share/wamdiff2_ros/msg``."""
    hashes = {}
    for description in sorted((prefix / "share" / "wamdiff2_ros" / "msg").glob("*.json")):
        entry = json.loads(description.read_text())["type_hashes"][0]
        hashes[entry["type_name"]] = entry["hash_string"]
    return hashes


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def run(args: argparse.Namespace) -> int:
    report = {
        "wamdiff2_ros": __version__,
        "python": sys.version.split()[0],
        "prefix": sys.prefix,
        "dependencies": {name: _version(name) for name in DISTRIBUTIONS},
        "messages": message_type_hashes(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"wamdiff2_ros {report['wamdiff2_ros']} (python {report['python']}, prefix {report['prefix']})")
    for name, version in report["dependencies"].items():
        print(f"  {name:<24} {version}")
    if not report["messages"]:
        print("no message types installed: run tools/bootstrap.sh")
        return 1
    print("message types:")
    for name, type_hash in report["messages"].items():
        print(f"  {name:<40} {type_hash[:22]}...")
    return 0
