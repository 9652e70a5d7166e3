"""``wamdiff2 bag play|record``: replay and record rosbag2 bags without rosbag2 (rosbags + rclpy)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bag",
        help="play a rosbag2 bag into ROS, or record topics into one (no rosbag2 needed)",
        description="Replay a rosbag2 bag (MCAP or sqlite3) into ROS 2 in stamp order, or record topics into "
        "a new MCAP bag. Works with the PyPI ROS wheels, where rosbag2 itself is not installable. For sim "
        "time, play with --clock and start the nodes with use_sim_time:=true.",
    )
    verbs = parser.add_subparsers(dest="bag_verb", metavar="ACTION", required=True)
    play = verbs.add_parser("play", help="publish a bag's messages in stamp order")
    play.add_argument("bag", type=Path, help="bag directory (with metadata.yaml)")
    play.add_argument("--rate", type=float, default=1.0, help="playback speed factor (default 1.0)")
    play.add_argument("--clock", action="store_true", help="publish /clock from the bag's time (40 Hz)")
    play.add_argument("--topics", nargs="+", default=[], metavar="TOPIC", help="only these topics")
    play.set_defaults(func=run_play)
    record = verbs.add_parser("record", help="record topics into a new MCAP bag")
    record.add_argument("bag", type=Path, help="bag directory to create (must not exist)")
    record.add_argument("--topics", nargs="+", required=True, metavar="TOPIC", help="topics to record")
    record.add_argument("--duration", type=float, default=10.0, help="seconds to record (default 10)")
    record.set_defaults(func=run_record)


def _print_counts(verb: str, counts, path: Path) -> None:
    for topic, count in sorted(counts.items()):
        print(f"  {topic:<50} {count:>6}")
    print(f"{verb} {sum(counts.values())} messages on {len(counts)} topics ({path})")


def run_play(args: argparse.Namespace) -> int:
    from wamdiff2_ros.nodes.bag_io import play, with_node

    counts = with_node(
        "wamdiff2_bag_player",
        lambda node: play(node, args.bag, rate=args.rate, clock=args.clock, topics=args.topics),
    )
    _print_counts("played", counts, args.bag)
    return 0


def run_record(args: argparse.Namespace) -> int:
    from wamdiff2_ros.nodes.bag_io import record, with_node

    counts = with_node(
        "wamdiff2_bag_recorder", lambda node: record(node, args.bag, args.topics, args.duration)
    )
    _print_counts("recorded", counts, args.bag)
    return 0
