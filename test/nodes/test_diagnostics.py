"""NodeHealth: problems raise the level until reported, notes only count; stage medians are reported."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticStatus

from wamdiff2_ros.nodes.diagnostics import NodeHealth


def _values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_a_note_counts_without_warning_and_a_problem_warns_once():
    health = NodeHealth("planner")
    health.set_model_state("ready")
    health.note("detection_parse", "box 3 has x1 > x2")
    status = health.status()
    assert status.level == DiagnosticStatus.OK
    assert _values(status)["note.detection_parse"] == "1"
    assert _values(status)["last_note.detection_parse"] == "box 3 has x1 > x2"
    health.problem("image", "bad encoding")
    assert health.status().level == DiagnosticStatus.WARN
    assert health.status().level == DiagnosticStatus.OK  # reported once, then cleared


def test_stage_medians_are_reported():
    health = NodeHealth("planner")
    for decode_ms in (10.0, 30.0, 20.0):
        health.record_stages({"decode": decode_ms, "parse": 0.1})
    values = _values(health.status())
    assert values["stage_p50_ms.decode"] == "20.0" and values["stage_p50_ms.parse"] == "0.1"
