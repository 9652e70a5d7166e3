"""The model as a closed-loop policy: `wamdiff2 eval closed-loop --policy model` (and `model-scored`, the
planner and scorer together) drives an episode through Planner.plan (tiny random weights: the plans are
meaningless, the plumbing is what is checked)."""

from __future__ import annotations

import json

import pytest

from wamdiff2_ros.cli.main import main
from wamdiff2_ros.model.checkpoint import save_checkpoint

pytestmark = pytest.mark.slow


def test_model_policy_drives_a_closed_loop_episode(tiny_model, tokenizer, tmp_path):
    checkpoint = save_checkpoint(tiny_model, tmp_path / "tiny", tokenizer, pixels=(3136, 12544))
    argv = ["eval", "closed-loop", "--policy", "model", "--policy", "model-scored", "--policy"]
    argv += ["constant-velocity", "--model"]
    argv += [str(checkpoint), "--episodes", "1", "--max-s", "2", "--block-size", "8", "--steps", "4"]
    argv += ["--detect-every", "2"]
    assert main([*argv, "--image-width", "192", "--out", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    model = report["policies"]["model"]
    assert model["source"] == str(checkpoint) and model["plans"] >= 4  # 2 Hz for 2 s
    assert model["forwards_per_plan"] > 1 and 0 <= model["fallbacks"] <= model["plans"]
    assert model["summary"]["episodes"] == 1 and "constant-velocity" in report["policies"]
    scored = report["policies"]["model-scored"]  # the planner and scorer nodes' pair
    assert scored["detections"] >= 1 and 0 <= scored["scorer_changed_candidate"] <= scored["plans"]
    assert 0 <= scored["scorer_dropped_colliding_greedy"] <= scored["scorer_changed_candidate"]
