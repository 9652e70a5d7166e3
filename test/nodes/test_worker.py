"""Newest-input-wins worker: a slow job drops stale inputs, never queues them, survives exceptions."""

from __future__ import annotations

import threading
import time

from wamdiff2_ros.nodes.worker import LatestInputWorker


def make_worker(job):
    results, errors = [], []
    worker = LatestInputWorker(
        job,
        on_result=lambda item, result, _s: results.append(result),
        on_error=lambda i, e: errors.append((i, e)),
    )
    return worker, results, errors


def test_slow_job_processes_newest_input_and_counts_drops() -> None:
    release = threading.Event()

    def job(item: int) -> int:
        release.wait(5)
        return item

    worker, results, _ = make_worker(job)
    worker.submit(0)
    time.sleep(0.05)  # the worker is now blocked on item 0
    for item in range(1, 10):
        worker.submit(item)
    release.set()
    assert worker.wait_idle(5)
    worker.stop()
    assert results == [0, 9]
    assert (worker.submitted, worker.completed, worker.dropped) == (10, 2, 8)


def test_exception_in_job_is_reported_and_worker_keeps_going() -> None:
    def job(item: int) -> int:
        if item == 1:
            raise RuntimeError("CUDA out of memory")
        return item * 10

    worker, results, errors = make_worker(job)
    for item in range(3):
        worker.submit(item)
        assert worker.wait_idle(5)
    worker.stop()
    assert results == [0, 20]
    assert [(i, str(e)) for i, e in errors] == [(1, "CUDA out of memory")]
    assert worker.failed == 1


def test_failing_result_callback_does_not_kill_the_thread() -> None:
    errors = []

    def on_result(item, result, seconds):
        raise ValueError("publish failed")

    worker = LatestInputWorker(lambda x: x, on_result, on_error=lambda i, e: errors.append(str(e)))
    worker.submit(1)
    worker.wait_idle(5)
    worker.submit(2)
    worker.wait_idle(5)
    worker.stop()
    assert errors == ["publish failed", "publish failed"]


def test_submit_returns_immediately_while_job_runs() -> None:
    worker, _, _ = make_worker(lambda item: time.sleep(0.3))
    worker.submit(0)
    start = time.perf_counter()
    for item in range(100):
        worker.submit(item)
    assert time.perf_counter() - start < 0.05
    worker.stop()
