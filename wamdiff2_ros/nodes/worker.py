"""Newest-input-wins inference thread: keeps model latency off the ROS executor.

The executor thread only ``submit``s; one worker thread runs the (slow) job on the newest submitted input.
An input that is replaced before the worker takes it is dropped and counted, never queued, so a slow model
drops stale frames instead of falling behind. Exceptions from the job are handed to ``on_error`` and the
worker carries on: a node never dies on one bad input.

With ``wait_for_fresher``, a worker that comes free to an input older than half the input period waits for
the next one instead (``fresher_wait_s``): a job slower than the camera otherwise starts, on average, on an
input half a period old (25 ms at 20 Hz), and its result is that much staler. Waiting costs at most a
period and a quarter of idle time, and the results it gives are fresher on average over time too
(docs/DECISIONS.md).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


PERIOD_SMOOTHING = 0.25  # weight of the newest interval in the input period's running estimate
LONGEST_PERIOD_S = 1.0  # a longer gap between inputs is a pause in the stream, not its period


def fresher_wait_s(age_s: float, period_s: float | None) -> float:
    """Seconds a free worker waits for the next input instead of starting on one ``age_s`` old.

    Inputs come every ``period_s`` (None: not known yet, so never wait). An input younger than half a period
    is taken at once: the next one would come later than this one is old. An older one waits until the next
    is due, plus a quarter period for jitter; if none comes, the worker takes the one it has.
    """
    if period_s is None or age_s < period_s / 2:
        return 0.0
    return max(period_s - age_s, 0.0) + period_s / 4


class LatestInputWorker(Generic[Item, Result]):
    """Runs ``job(item)`` on a background thread for the newest submitted item.

    Args:
        job: the slow function (model inference).
        on_result: called on the worker thread with (item, result, seconds the job took).
        on_error: called on the worker thread with (item, exception).
        name: thread name, for debugging.
        wait_for_fresher: on coming free, wait for a fresher input than a stale pending one
            (``fresher_wait_s``).
    """

    def __init__(
        self,
        job: Callable[[Item], Result],
        on_result: Callable[[Item, Result, float], None],
        on_error: Callable[[Item, BaseException], None],
        name: str = "inference",
        wait_for_fresher: bool = False,
    ) -> None:
        self._job, self._on_result, self._on_error = job, on_result, on_error
        self.wait_for_fresher = wait_for_fresher
        self._condition = threading.Condition()
        self._pending: Item | None = None
        self._has_pending = False
        self._pending_at: float | None = None  # monotonic time of the latest submit
        self._call: list = []  # [function, done event, outcome] of a pending ``call``, ahead of any input
        self.period_s: float | None = None  # running estimate of the time between submits
        self._busy = False
        self._stopping = False
        self.submitted = self.dropped = self.completed = self.failed = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Item) -> None:
        """Offer an input; replaces (and counts as dropped) one the worker has not started yet."""
        now = time.monotonic()
        with self._condition:
            self.submitted += 1
            if self._has_pending:
                self.dropped += 1
            if self._pending_at is not None and now - self._pending_at < LONGEST_PERIOD_S:
                interval = now - self._pending_at
                self.period_s = (
                    interval
                    if self.period_s is None
                    else self.period_s + PERIOD_SMOOTHING * (interval - self.period_s)
                )
            self._pending, self._has_pending, self._pending_at = item, True, now
            self._condition.notify_all()

    def call(self, function: Callable[[], Result]) -> Result:
        """Run ``function`` on the worker thread, ahead of any pending input, and return its result (or raise
        its exception) here: set-up work (a model's warm-up) then grows the memory of the thread that plans.

        Raises:
            RuntimeError: the worker is stopping.
        """
        slot = [function, threading.Event(), None]
        with self._condition:
            if self._stopping:
                raise RuntimeError("the worker is stopping")
            self._call = slot
            self._condition.notify_all()
        slot[1].wait()
        failed, value = slot[2]
        if failed:
            raise value
        return value

    @staticmethod
    def _run_call(slot: list) -> None:
        function, done, _ = slot
        try:
            slot[2] = (False, function())
        except Exception as error:  # handed back to the caller of ``call``
            slot[2] = (True, error)
        done.set()

    @property
    def busy(self) -> bool:
        with self._condition:
            return self._busy or self._has_pending

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until nothing is pending or running; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._condition:
            while self._busy or self._has_pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(remaining)
            return True

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish the running job, drop any pending input, and join the thread."""
        with self._condition:
            self._stopping = True
            if self._has_pending:
                self.dropped += 1
            if self._call and self._call[2] is None:  # a call the worker will not run now
                self._call[2] = (True, RuntimeError("the worker stopped"))
                self._call[1].set()
            self._pending, self._has_pending = None, False
            self._condition.notify_all()
        self._thread.join(timeout_s)

    def _take(self) -> tuple[bool, Item | None]:
        """(False, None) once stopping, (True, None) for a pending ``call``, else (True, the input to run);
        holds the condition's lock."""
        while True:
            while not self._has_pending and not self._stopping and not self._call:
                self._condition.wait()
            if self._stopping:
                return False, None
            if self._call:
                return True, None
            age_s = time.monotonic() - self._pending_at
            wait_s = fresher_wait_s(age_s, self.period_s) if self.wait_for_fresher else 0.0
            deadline, submitted = time.monotonic() + wait_s, self.submitted
            while self.submitted == submitted and not self._stopping and time.monotonic() < deadline:
                self._condition.wait(deadline - time.monotonic())
            if self._stopping:
                return False, None
            if self.submitted == submitted:  # nothing fresher came: take what is there
                break
        item, self._pending, self._has_pending = self._pending, None, False
        return True, item

    def _run(self) -> None:
        while True:
            with self._condition:
                running, item = self._take()
                if not running:
                    return
                call = self._call
                self._busy = True
            if call:
                self._run_call(call)
                with self._condition:
                    self._call, self._busy = [], False
                    self._condition.notify_all()
                continue
            start = time.perf_counter()
            try:
                result = self._job(item)
                self.completed += 1
                self._on_result(item, result, time.perf_counter() - start)
            except Exception as error:  # reported, never fatal: see the module docstring
                self.failed += 1
                try:
                    self._on_error(item, error)
                except Exception:
                    traceback.print_exc()  # the error handler itself failed: keep the thread alive
            finally:
                with self._condition:
                    self._busy = False
                    self._condition.notify_all()
