"""Approximate time synchronisation of camera frames with ego state (message_filters is not available here).

The camera is the trigger: each frame is paired with the buffered state message whose stamp is nearest to
the frame's, if it lies within ``slop_s``. A frame waits (newest frame only) until a state at or after its
stamp has arrived, so a later, closer state can still win; a frame whose stamp falls more than ``slop_s``
behind the newest state without a partner is dropped as unmatched. Stamps going backwards by more than
``reset_after_backjump_s`` (a looping bag, a restarted simulator) reset the buffers instead of matching
across the jump. Pure Python on integer nanoseconds; no ROS types, so the rules are tested directly.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Generic, TypeVar

Frame = TypeVar("Frame")
State = TypeVar("State")

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Match(Generic[Frame, State]):
    frame: Frame
    frame_stamp_ns: int
    state: State
    state_stamp_ns: int

    @property
    def skew_s(self) -> float:
        """State stamp minus frame stamp, seconds (negative: the state is older than the frame)."""
        return (self.state_stamp_ns - self.frame_stamp_ns) / NS_PER_S


class ApproximateSync(Generic[Frame, State]):
    """Pairs frames with the nearest-stamped state within a tolerance.

    Args:
        slop_s: largest accepted |state stamp - frame stamp|, seconds.
        state_queue_size: state messages kept (at 50 Hz odometry, 50 covers one second).
        reset_after_backjump_s: a stamp this far behind the newest one seen resets the synchroniser.

    ``counts`` tallies what happened to inputs: ``matched``, ``unmatched`` (no state within slop),
    ``superseded`` (a newer frame arrived while waiting), ``out_of_order`` (older than the last match),
    ``reset`` (a backwards jump).
    """

    def __init__(
        self, slop_s: float, state_queue_size: int = 50, reset_after_backjump_s: float = 1.0
    ) -> None:
        if slop_s < 0 or state_queue_size < 1 or reset_after_backjump_s <= 0:
            raise ValueError("slop_s >= 0, state_queue_size >= 1 and reset_after_backjump_s > 0 are required")
        self.slop_ns = int(slop_s * NS_PER_S)
        self.state_queue_size = state_queue_size
        self.backjump_ns = int(reset_after_backjump_s * NS_PER_S)
        self.counts: Counter[str] = Counter()
        self._reset()

    def _reset(self) -> None:
        self._state_stamps: list[int] = []  # sorted
        self._states: list[State] = []
        self._pending: tuple[int, Frame] | None = None
        self._last_matched_ns: int | None = None
        self._newest_ns: int | None = None

    def _check_backjump(self, stamp_ns: int) -> None:
        if self._newest_ns is not None and stamp_ns < self._newest_ns - self.backjump_ns:
            self.counts["reset"] += 1
            self._reset()
        self._newest_ns = stamp_ns if self._newest_ns is None else max(self._newest_ns, stamp_ns)

    def add_state(self, stamp_ns: int, state: State) -> Match[Frame, State] | None:
        """Buffer a state message; returns a match if it completes the waiting frame."""
        self._check_backjump(stamp_ns)
        index = bisect.bisect_right(self._state_stamps, stamp_ns)
        self._state_stamps.insert(index, stamp_ns)
        self._states.insert(index, state)
        if len(self._states) > self.state_queue_size:
            del self._state_stamps[0], self._states[0]
        return self._try_match()

    def add_frame(self, stamp_ns: int, frame: Frame) -> Match[Frame, State] | None:
        """Offer a camera frame; returns a match now, or None (waiting, or dropped: see ``counts``)."""
        self._check_backjump(stamp_ns)
        if self._last_matched_ns is not None and stamp_ns <= self._last_matched_ns:
            self.counts["out_of_order"] += 1
            return None
        if self._pending is not None:
            if stamp_ns <= self._pending[0]:
                self.counts["out_of_order"] += 1
                return None
            self.counts["superseded"] += 1
        self._pending = (stamp_ns, frame)
        return self._try_match()

    def _try_match(self) -> Match[Frame, State] | None:
        if self._pending is None or not self._states:
            return None
        frame_ns, frame = self._pending
        if self._state_stamps[-1] < frame_ns:
            return None  # a state nearer to the frame may still come
        index = bisect.bisect_left(self._state_stamps, frame_ns)  # first state at or after the frame
        candidates = [i for i in (index - 1, index) if 0 <= i < len(self._states)]
        best = min(candidates, key=lambda i: abs(self._state_stamps[i] - frame_ns))
        self._pending = None
        if abs(self._state_stamps[best] - frame_ns) > self.slop_ns:
            self.counts["unmatched"] += 1
            return None
        self.counts["matched"] += 1
        self._last_matched_ns = frame_ns
        return Match(frame, frame_ns, self._states[best], self._state_stamps[best])
