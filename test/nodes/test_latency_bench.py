"""``wamdiff2 bench node`` measures what it says: a slow stream's frames are each planned and timed, or
counted as dropped."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from wamdiff2_ros.nodes.latency_bench import measure


@pytest.mark.ros
@pytest.mark.slow
def test_slow_stream_is_planned_or_counted_and_latencies_are_ordered(tmp_path: Path) -> None:
    frame = tmp_path / "frame.png"  # another size than the published one: resized
    cv2.imwrite(str(frame), np.random.default_rng(1).integers(0, 256, (90, 160, 3), dtype=np.uint8))
    result = measure(
        preset="tiny",
        device="cpu",
        width=320,
        height=180,
        rate_hz=2.0,
        frames=4,
        overrides={"decoder.steps": 4, "candidates.count": 1, "input.max_age_s": 5.0},
        log=tmp_path / "planner.log",
        frame=frame,
    )
    assert result["frames_sent"] == 4
    assert result["frames_planned"] + result["frames_fallback"] + result["frames_dropped"] == 4
    # At 2 Hz the tiny model plans every frame on an idle machine; on two cores busy with other tests a
    # plan can outlast the period and the newest frame wins (a drop), so only "some are planned" holds.
    assert result["frames_planned"] >= 1 and result["frames_fallback"] == 0
    assert 0 < result["latency_min_ms"] <= result["latency_p50_ms"] <= result["latency_p99_ms"] < 10_000
    stages = result["planner_stage_p50_ms"]  # where the node's time goes, from its /diagnostics
    assert {"delivery", "queue", "convert", "preprocess", "decode", "publish"} <= set(stages)
    assert 0 <= result["outside_node_p50_ms"] <= result["latency_p50_ms"]  # same clock on both ends
    assert result["gpu_memory_allocated_mb_max"] is None  # a CPU model
    assert sum(stages.values()) <= result["latency_p99_ms"]


@pytest.mark.ros
@pytest.mark.slow
def test_a_route_model_is_given_its_route_and_plans(route_model: Path, tmp_path: Path) -> None:
    """A model of the ``branch_route`` rule plans only with a route: the bench gives it one, so its frames
    are the model's plans, not the fallback's. (The bundled model's weights, told to read the route.)"""
    result = measure(
        preset="",
        device="cpu",
        width=320,
        height=180,
        rate_hz=1.0,
        frames=2,
        overrides={"model.checkpoint": str(route_model), "candidates.count": 1, "input.max_age_s": 5.0},
        log=tmp_path / "planner.log",
    )
    assert result["frames_planned"] >= 1 and result["frames_fallback"] == 0
