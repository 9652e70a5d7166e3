"""A pool that stalls is replaced and the results go on in order (sim/ordered_pool.py)."""

from __future__ import annotations

import logging
import multiprocessing

import pytest
from stalling import square_or_hang

from wamdiff2_ros.sim.ordered_pool import ordered_results


def test_a_stalled_pool_is_replaced_and_the_results_stay_in_order(caplog) -> None:
    hung: set[int] = set()

    def job(index: int) -> tuple[int, bool]:  # item 5 hangs the first time it is handed out
        hang = index == 5 and index not in hung
        hung.add(index)
        return index, hang

    context = multiprocessing.get_context("spawn")
    with caplog.at_level(logging.WARNING):
        results = list(ordered_results(context, 2, square_or_hang, job, 4, count=10, stall_s=5))
    assert results == [i * i for i in range(10)]
    assert "a new pool goes on from item 5" in caplog.text


def test_a_pool_that_keeps_stalling_raises() -> None:
    context = multiprocessing.get_context("spawn")
    hanging = ordered_results(context, 1, square_or_hang, lambda i: (i, True), 2, stall_s=1, restarts=1)
    with pytest.raises(multiprocessing.TimeoutError):
        next(hanging)


def test_stalls_at_different_items_each_get_their_restarts() -> None:
    hung: set[int] = set()

    def job(index: int) -> tuple[int, bool]:  # items 2 and 6 hang once each
        hang = index in (2, 6) and index not in hung
        hung.add(index)
        return index, hang

    context = multiprocessing.get_context("spawn")
    results = ordered_results(context, 2, square_or_hang, job, 4, count=8, stall_s=5, restarts=1)
    assert list(results) == [i * i for i in range(8)]
