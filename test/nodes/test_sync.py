"""Approximate synchroniser: nearest state within slop, waits for a closer state, drops what cannot match."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff2_ros.nodes.sync import NS_PER_S, ApproximateSync

MS = 1_000_000


def test_frame_pairs_with_nearest_state_once_a_later_state_arrives() -> None:
    sync = ApproximateSync(slop_s=0.05)
    assert sync.add_state(100 * MS, "s100") is None
    assert sync.add_frame(118 * MS, "f") is None  # a closer state may still come
    match = sync.add_state(120 * MS, "s120")
    assert (match.frame, match.state, match.skew_s) == ("f", "s120", pytest.approx(0.002))


def test_earlier_state_wins_when_nearer() -> None:
    sync = ApproximateSync(slop_s=0.05)
    sync.add_state(100 * MS, "s100")
    sync.add_frame(103 * MS, "f")
    match = sync.add_state(140 * MS, "s140")
    assert match.state == "s100" and match.skew_s == pytest.approx(-0.003)


def test_frame_after_state_arrival_matches_immediately() -> None:
    sync = ApproximateSync(slop_s=0.05)
    sync.add_state(100 * MS, "a")
    sync.add_state(200 * MS, "b")
    assert sync.add_frame(190 * MS, "f").state == "b"


def test_frame_without_state_within_slop_is_dropped() -> None:
    sync = ApproximateSync(slop_s=0.01)
    sync.add_state(100 * MS, "a")
    assert sync.add_frame(150 * MS, "f") is None
    assert sync.add_state(200 * MS, "b") is None
    assert sync.counts["unmatched"] == 1


def test_newer_frame_supersedes_waiting_one() -> None:
    sync = ApproximateSync(slop_s=0.05)
    sync.add_state(100 * MS, "a")
    sync.add_frame(110 * MS, "old")
    sync.add_frame(130 * MS, "new")
    assert sync.add_state(131 * MS, "b").frame == "new"
    assert sync.counts["superseded"] == 1


def test_frames_older_than_the_last_match_are_rejected() -> None:
    sync = ApproximateSync(slop_s=0.05)
    sync.add_state(100 * MS, "a")
    sync.add_state(200 * MS, "b")
    assert sync.add_frame(190 * MS, "f1") is not None
    assert sync.add_frame(150 * MS, "f0") is None
    assert sync.counts["out_of_order"] == 1


def test_backwards_jump_resets_instead_of_matching_across_it() -> None:
    sync = ApproximateSync(slop_s=0.05, reset_after_backjump_s=1.0)
    sync.add_state(10 * NS_PER_S, "late")
    sync.add_frame(10 * NS_PER_S, "f_late")
    sync.add_state(0, "loop_start")  # the bag looped
    assert sync.counts["reset"] == 1
    assert sync.add_frame(0, "f0").state == "loop_start"


def test_state_queue_is_bounded() -> None:
    sync = ApproximateSync(slop_s=0.0, state_queue_size=3)
    for i in range(10):
        sync.add_state(i * MS, i)
    assert sync.add_frame(2 * MS, "f") is None  # state 2 was evicted; 7..9 remain, all far
    assert sync.counts["unmatched"] == 1


@pytest.mark.parametrize("kwargs", [{"slop_s": -1}, {"slop_s": 0.1, "state_queue_size": 0}])
def test_invalid_configuration_is_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="required"):
        ApproximateSync(**kwargs)


@settings(max_examples=100, deadline=None)
@given(
    events=st.lists(st.tuples(st.booleans(), st.integers(0, 2_000)), min_size=1, max_size=60),
    slop_ms=st.integers(0, 50),
)
def test_every_match_is_the_nearest_buffered_state_within_slop(events, slop_ms: int) -> None:
    """Against a plain restatement: within slop, nearest among the states seen so far, frames increase."""
    sync = ApproximateSync(slop_s=slop_ms / 1000, state_queue_size=1000, reset_after_backjump_s=10.0)
    states: list[int] = []
    matched_frames: list[int] = []
    for is_frame, stamp_ms in sorted(events, key=lambda e: e[1]):  # time-ordered inputs
        match = (
            sync.add_frame(stamp_ms * MS, stamp_ms) if is_frame else sync.add_state(stamp_ms * MS, stamp_ms)
        )
        if not is_frame:
            states.append(stamp_ms)
        if match is not None:
            nearest = min(abs(s - match.frame) for s in states)
            assert abs(match.state - match.frame) == nearest <= slop_ms
            matched_frames.append(match.frame)
    assert matched_frames == sorted(set(matched_frames))
