"""A traced episode is the untraced one, with the expert's plan beside each of the policy's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wamdiff2_ros.cli.main import main as cli_main
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.baselines import baseline_factory
from wamdiff2_ros.eval.trace import trace_episode
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, run_episode

CONFIG = ClosedLoopConfig(route_length_m=100.0, max_duration_s=4.0)


def test_tracing_the_expert_pairs_each_plan_with_itself():
    result, points = trace_episode(3, baseline_factory("expert"), CONFIG)
    assert len(points) == round(CONFIG.max_duration_s * CONFIG.plan_hz) == len({p.time_s for p in points})
    assert [p.time_s for p in points] == sorted(p.time_s for p in points)
    for point in points:
        assert point.plan.shape == point.expert.shape == (8, 2)
        np.testing.assert_array_equal(point.plan, point.expert)
    assert result.route_completion > 0


def test_a_traced_episode_drives_as_the_untraced_one():
    factory = baseline_factory("constant-velocity")
    traced, points = trace_episode(5, factory, CONFIG)
    plain = run_episode(5, factory, CONFIG)
    np.testing.assert_array_equal(traced.ego_path_map, plain.ego_path_map)
    assert traced.end_reason == plain.end_reason and points[0].speed_mps > 0
    assert not np.array_equal(points[-1].plan, points[-1].expert)  # constant velocity is not the expert


def test_eval_trace_prints_and_writes_every_plan(tmp_path, capsys):
    out = tmp_path / "trace.jsonl"
    argv = ["eval", "trace", "--policy", "expert", "--seed", "3", "--max-s", "3", "--every", "1"]
    assert cli_main([*argv, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and set(rows[0]) == {"time_s", "speed_mps", "command", "plan", "expert"}
    assert rows[0]["plan"] == rows[0]["expert"]
    printed = capsys.readouterr().out
    lines = printed.splitlines()  # the episode, the header, rows at 0, 1 and 2 s of the 6, where it wrote
    assert lines[0].startswith("seed 3 (") and len(lines) == 2 + 3 + 1 and lines[-1] == f"wrote {out}"


def test_sampled_plans_are_traced_beside_the_driven_one_and_change_nothing_it_drives():
    factory = baseline_factory("constant-velocity")
    plain, plain_points = trace_episode(5, factory, CONFIG)

    def sampler(observation):  # two stand-ins: constant velocity's plan, and one standing still
        return [factory(None)(observation), np.zeros((8, 2))]

    traced, points = trace_episode(5, factory, CONFIG, sampler=sampler)
    np.testing.assert_array_equal(traced.ego_path_map, plain.ego_path_map)
    assert [p.samples.shape for p in points] == [(2, 8, 2)] * len(plain_points)
    for point in points:
        np.testing.assert_array_equal(point.samples[0], point.plan)
        gaps = [np.linalg.norm(s[-1] - point.expert[-1]) for s in point.samples]
        assert point.near_expert() == sum(gap <= 3.0 for gap in gaps)
    assert "samples" in points[0].row() and "samples" not in plain_points[0].row()


def test_eval_trace_samples_the_bundled_models_plans(tmp_path, capsys):
    out = tmp_path / "trace.jsonl"
    argv = ["eval", "trace", "--seed", "3", "--max-s", "1", "--image-width", "256", "--samples", "3"]
    assert cli_main([*argv, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(np.shape(row["samples"]) == (3, 8, 2) for row in rows)
    assert capsys.readouterr().out.splitlines()[1].endswith("sampled near expert")
    with pytest.raises(InputError, match="--policy model"):
        cli_main(["eval", "trace", "--policy", "expert", "--samples", "2"])
