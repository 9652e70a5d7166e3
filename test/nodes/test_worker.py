"""Newest-input-wins worker: a slow job drops stale inputs, never queues them, survives exceptions."""

from __future__ import annotations

import threading
import time

import pytest

from wamdiff2_ros.nodes import worker as worker_module
from wamdiff2_ros.nodes.worker import LatestInputWorker, fresher_wait_s


def make_worker(job, wait_for_fresher: bool = False):
    results, errors = [], []
    worker = LatestInputWorker(
        job,
        on_result=lambda item, result, _s: results.append(result),
        on_error=lambda i, e: errors.append((i, e)),
        wait_for_fresher=wait_for_fresher,
    )
    return worker, results, errors


def busy_fresher_worker():
    """A frame-waiting worker blocked on item 0 (``release`` lets it finish), and its results."""
    job, started, release = blocking_job()
    worker, results, _ = make_worker(job, wait_for_fresher=True)
    worker.submit(0)
    assert started.wait(5)
    return worker, results, release


def blocking_job() -> tuple:
    """A job that signals ``started`` and then blocks until ``release`` is set (5 s at most)."""
    started, release = threading.Event(), threading.Event()

    def job(item: int) -> int:
        started.set()
        release.wait(5)
        return item

    return job, started, release


def test_slow_job_processes_newest_input_and_counts_drops() -> None:
    job, started, release = blocking_job()
    worker, results, _ = make_worker(job)
    worker.submit(0)
    assert started.wait(5)  # the worker is now blocked on item 0
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


def test_submit_never_waits_for_the_running_job() -> None:
    """Submitting while the job is blocked completes (the job cannot finish meanwhile): the executor thread
    that submits is never held up by the model. How fast a submit is belongs to the benchmarks."""
    job, started, release = blocking_job()
    worker, results, _ = make_worker(job)
    worker.submit(0)
    assert started.wait(5)
    submitter = threading.Thread(target=lambda: [worker.submit(item) for item in range(1, 101)])
    submitter.start()
    submitter.join(5)  # a deadlock guard, not a timing assertion
    assert not submitter.is_alive() and not release.is_set()
    assert (worker.submitted, worker.dropped, worker.completed) == (101, 99, 0)
    release.set()
    assert worker.wait_idle(5)
    worker.stop()
    assert results == [0, 100]


def test_fresher_wait_takes_a_young_input_and_waits_out_an_old_one_until_the_next_is_due() -> None:
    assert fresher_wait_s(0.2, None) == 0.0  # no period known yet: never wait
    assert fresher_wait_s(0.02, 0.05) == 0.0  # younger than half a period
    assert fresher_wait_s(0.03, 0.05) == pytest.approx(0.02 + 0.0125)  # the next is due in 20 ms, + jitter
    assert fresher_wait_s(0.2, 0.05) == pytest.approx(0.0125)  # overdue: a short wait, then take it


class FakeTime:
    """The worker's clock, moved by hand (the condition's own timeouts stay real)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    perf_counter = staticmethod(time.perf_counter)


def test_a_worker_freed_to_a_stale_input_plans_the_next_one_that_comes(monkeypatch) -> None:
    clock = FakeTime()  # frozen while the worker waits: it waits until the fresher frame comes
    monkeypatch.setattr(worker_module, "time", clock)
    worker, results, release = busy_fresher_worker()
    for item in (1, 2, 3):  # a 50 ms camera while item 0 runs
        clock.now += 0.05
        worker.submit(item)
    assert worker.period_s == pytest.approx(0.05)
    clock.now += 0.04  # item 3 is 40 ms old when the job ends: older than half a period
    release.set()
    worker.submit(4)  # at once or while the worker waits: either way the fresher frame is planned
    assert worker.wait_idle(5)
    worker.stop()
    assert results == [0, 4]
    assert worker.dropped == 3


def test_a_worker_freed_to_a_stale_input_takes_it_when_no_fresher_one_comes() -> None:
    worker, results, release = busy_fresher_worker()
    worker.submit(1)
    worker.period_s = 1e-5  # a camera far faster than item 1's age: the worker waits 2.5 us for a next one
    release.set()
    assert worker.wait_idle(5)
    worker.stop()
    assert results == [0, 1]


def test_call_runs_on_the_worker_thread_and_hands_back_its_result_or_error() -> None:
    worker, results, _ = make_worker(lambda item: item)
    assert worker.call(lambda: threading.current_thread().name) == "inference"
    with pytest.raises(ValueError, match="bad warm-up"):
        worker.call(lambda: (_ for _ in ()).throw(ValueError("bad warm-up")))
    worker.submit(7)  # inputs still flow after calls
    assert worker.wait_idle(5)
    worker.stop()
    assert results == [7]
    with pytest.raises(RuntimeError, match="stopping"):
        worker.call(lambda: None)
