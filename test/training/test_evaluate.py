"""End-of-phase evaluation scores every task with its own metric and counts decoder forwards."""

from __future__ import annotations

import pytest

from wamdiff2_ros.cli.main import main as cli_main
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.training.data import load_task_records
from wamdiff2_ros.training.evaluate import evaluate_records

from .test_stages import CONFIG_DIR


def test_each_task_gets_its_metric_and_forward_counts(tiny_model, tokenizer, dataset_dir):
    files = {task: str(dataset_dir / f"{task}.json") for task in ("planning", "detection", "qa")}
    records = [r for r in load_task_records(files) if r.id in ("s0", "s0_det", "s0_qa0")]
    result = evaluate_records(
        tiny_model, tokenizer, records, 32, max_new_tokens=96, min_pixels=3136, max_pixels=3136
    )
    assert set(result) == {"planning", "detection", "qa"}
    planning = result["planning"]
    assert planning["parsed"] == 1.0  # the grammar makes every planning answer parse
    assert len(planning["l2_per_waypoint_m"]) == 8 and planning["fde_m"] >= 0.0
    assert 0.0 <= result["qa"]["exact_match"] <= 1.0
    assert result["detection"]["truth_boxes"] == 1 and 0.0 <= result["detection"]["map"] <= 1.0
    for metrics in result.values():
        assert metrics["samples"] == 1 and metrics["forwards_per_answer"] >= 1.0


def test_cli_refuses_a_config_of_another_stage():
    with pytest.raises(InputError, match="configures stage 'sft', not 'adapt'"):
        cli_main(["train", "adapt", "--config", str(CONFIG_DIR / "train_sft_tiny.yaml")])
