"""``wamdiff2 plan`` prints waypoints, forwards and time for an image file, as a table or JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from wamdiff2_ros.cli.main import main

STATE = ["--velocity", "4.66", "-0.09", "--acceleration", "0.17", "-1.53", "--command", "right"]


@pytest.fixture(scope="module")
def image_file(tmp_path_factory, front_image):
    path = tmp_path_factory.mktemp("images") / "front.png"
    Image.fromarray(front_image).save(path)
    return str(path)


def test_plan_json_has_eight_bounded_waypoints_and_costs(image_file, capsys):
    code = main(["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "8", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    waypoints = np.array(report["waypoints"])
    assert waypoints.shape == (8, 2) and np.isfinite(waypoints).all()
    assert report["forwards"] == 1 + sum(report["steps_per_block"])
    assert report["decode_s"] > 0 and report["config"]["block_size"] == 8


def test_plan_table_lists_every_candidate(image_file, capsys):
    argv = ["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "16"]
    argv += ["--candidates", "2"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0
    assert "candidate 0 (seed 0)" in out and "candidate 1 (seed 1)" in out
    assert out.count("\n    4.0 ") == 2  # the last waypoint row of each candidate
    assert "forwards" in out and "ms/token" in out


def test_plan_reports_an_unreadable_image(tmp_path, capsys):
    bad = tmp_path / "front.png"
    bad.write_text("not an image")
    assert main(["plan", "--image", str(bad), *STATE]) == 2
    assert "cannot read image" in capsys.readouterr().err


def test_plan_reports_a_missing_checkpoint(image_file, tmp_path, capsys):
    assert main(["plan", "--image", image_file, *STATE, "--checkpoint", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
