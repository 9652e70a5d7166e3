"""A traced episode is the untraced one, with the expert's plan beside each of the policy's."""

from __future__ import annotations

import json

import numpy as np

from wamdiff2_ros.cli.main import main as cli_main
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
