"""Running statistics of a node and their /diagnostics status (diagnostic_msgs/DiagnosticArray)."""

from __future__ import annotations

import threading
from collections import Counter, deque

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


class NodeHealth:
    """Thread-safe tallies of a node's work: latencies, drops, input age, problems by kind.

    ``problem(kind, reason)`` records a bad input or failure; the newest reason per kind is kept so the
    diagnostic names it. The level is ERROR when the model failed to load or the node raises an alarm, WARN
    while the model is not ready or when problems occurred since the previous report, else OK.
    """

    def __init__(self, name: str, window: int = 200) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._latencies_ms: deque[float] = deque(maxlen=window)
        self._input_age_ms: deque[float] = deque(maxlen=window)
        self._stages_ms: dict[str, deque[float]] = {}
        self._window = window
        self.counts: Counter[str] = Counter()
        self._problems: dict[str, str] = {}
        self._new_problems: set[str] = set()
        self._notes: dict[str, str] = {}
        self.model_state = "loading"
        self.model_message = ""

    def set_model_state(self, state: str, message: str = "") -> None:
        with self._lock:
            self.model_state, self.model_message = state, message

    def record_latency(self, latency_ms: float, input_age_ms: float) -> None:
        with self._lock:
            self._latencies_ms.append(latency_ms)
            self._input_age_ms.append(input_age_ms)

    def record_stages(self, stages_ms: dict[str, float]) -> None:
        """Per-stage times of one plan (``Planner.plan``'s ``stages_s`` in ms); their medians are reported."""
        with self._lock:
            for stage, value in stages_ms.items():
                self._stages_ms.setdefault(stage, deque(maxlen=self._window)).append(value)

    def count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self.counts[key] += amount

    def problem(self, kind: str, reason: str) -> None:
        with self._lock:
            self.counts[f"problem.{kind}"] += 1
            self._problems[kind] = reason
            self._new_problems.add(kind)

    def note(self, kind: str, reason: str) -> None:
        """Count a fact about the model's answers that is no fault of the node (e.g. a detection box the
        parser rejected): reported with its newest reason, never raising the level."""
        with self._lock:
            self.counts[f"note.{kind}"] += 1
            self._notes[kind] = reason

    def latency_percentiles_ms(self) -> tuple[float, float]:
        with self._lock:
            if not self._latencies_ms:
                return float("nan"), float("nan")
            p50, p99 = np.percentile(np.array(self._latencies_ms), [50, 99])
            return float(p50), float(p99)

    def status(self, extra: dict[str, str] | None = None, alarm: str | None = None) -> DiagnosticStatus:
        """The current status; clears the "new problems" that made it WARN. ``alarm`` (the node's own
        judgement, e.g. no plan for too long) makes it ERROR with that message."""
        p50, p99 = self.latency_percentiles_ms()
        with self._lock:
            if self.model_state == "error":
                level, message = ERROR, f"model failed to load: {self.model_message}"
            elif alarm:
                level, message = ERROR, alarm
            elif self.model_state != "ready":
                level, message = WARN, f"model {self.model_state}: {self.model_message}".rstrip(": ")
            elif self._new_problems:
                level = WARN
                message = "; ".join(f"{kind}: {self._problems[kind]}" for kind in sorted(self._new_problems))
            else:
                level, message = OK, "planning"
            self._new_problems.clear()
            age = float(np.median(self._input_age_ms)) if self._input_age_ms else float("nan")
            values = {
                "model_state": self.model_state,
                **({"model": self.model_message} if self.model_message else {}),
                "latency_p50_ms": f"{p50:.1f}",
                "latency_p99_ms": f"{p99:.1f}",
                "input_age_median_ms": f"{age:.1f}",
                **{f"stage_p50_ms.{k}": f"{np.median(v):.1f}" for k, v in self._stages_ms.items()},
                **{key: str(value) for key, value in sorted(self.counts.items())},
                **{f"last_problem.{kind}": reason for kind, reason in sorted(self._problems.items())},
                **{f"last_note.{kind}": reason for kind, reason in sorted(self._notes.items())},
                **(extra or {}),
            }
        return DiagnosticStatus(
            level=level,
            name=self.name,
            message=message,
            hardware_id="wamdiff2",
            values=[KeyValue(key=k, value=v) for k, v in values.items()],
        )

    def array(self, stamp, extra: dict[str, str] | None = None, alarm: str | None = None) -> DiagnosticArray:
        msg = DiagnosticArray(status=[self.status(extra, alarm)])
        msg.header.stamp = stamp
        return msg


def steady_clock() -> Clock:
    """The clock of diagnostics timers: monotonic wall time, whatever ``use_sim_time`` says."""
    return Clock(clock_type=ClockType.STEADY_TIME)
