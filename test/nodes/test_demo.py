"""The README's first command end to end (short): drive bag -> planner and scorer processes running the
bundled default model -> pictures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from wamdiff2_ros.nodes.demo import generate_drive, run_demo


@pytest.mark.ros
@pytest.mark.slow
def test_demo_plans_a_replayed_drive_and_draws_it(tmp_path: Path) -> None:
    outputs = run_demo(tmp_path / "demo", seconds=3.0, seed=1, model="", preset="", rate=0.5)
    summary = json.loads(outputs.metrics.read_text())
    assert summary["model"] == "default model" and summary["frames_planned"] >= 2
    # the model's plans, not the fallback's: the bag gives the route model its route
    assert summary["frames_fallback"] < summary["frames_planned"]
    assert "constant_velocity" in summary and "selected_plan" in summary
    assert len(summary["selected_plan"]["l2_per_waypoint_m"]) == 8
    sheet = Image.open(outputs.contact_sheet)
    assert sheet.size[0] > 600
    gif = Image.open(outputs.animation)
    assert gif.n_frames == summary["frames_planned"]


def test_a_second_demo_replaces_the_first_drive(tmp_path: Path) -> None:
    first, _ = generate_drive(tmp_path, 1.0, seed=1, command_rule="branch")
    second, scenes = generate_drive(tmp_path, 1.0, seed=2, command_rule="branch")
    assert second == first and second.is_dir() and (scenes / "camera.json").is_file()
