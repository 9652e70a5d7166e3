"""The soak's resource probe reads a live process's memory and open files (the soak itself is a benchmark)."""

from __future__ import annotations

import os

from wamdiff2_ros.nodes.soak import process_usage


def test_process_usage_counts_an_opened_file(tmp_path):
    before = process_usage(os.getpid())
    with (tmp_path / "held").open("w"):
        during = process_usage(os.getpid())
    assert before["rss_mib"] > 0 and during["open_fds"] == before["open_fds"] + 1
