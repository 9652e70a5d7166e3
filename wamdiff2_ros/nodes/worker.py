"""Newest-input-wins inference thread: keeps model latency off the ROS executor.

The executor thread only ``submit``s; one worker thread runs the (slow) job on the newest submitted input.
An input that is replaced before the worker takes it is dropped and counted, never queued, so a slow model
drops stale frames instead of falling behind. Exceptions from the job are handed to ``on_error`` and the
worker carries on: a node never dies on one bad input.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class LatestInputWorker(Generic[Item, Result]):
    """Runs ``job(item)`` on a background thread for the newest submitted item.

    Args:
        job: the slow function (model inference).
        on_result: called on the worker thread with (item, result, seconds the job took).
        on_error: called on the worker thread with (item, exception).
        name: thread name, for debugging.
    """

    def __init__(
        self,
        job: Callable[[Item], Result],
        on_result: Callable[[Item, Result, float], None],
        on_error: Callable[[Item, BaseException], None],
        name: str = "inference",
    ) -> None:
        self._job, self._on_result, self._on_error = job, on_result, on_error
        self._condition = threading.Condition()
        self._pending: Item | None = None
        self._has_pending = False
        self._busy = False
        self._stopping = False
        self.submitted = self.dropped = self.completed = self.failed = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Item) -> None:
        """Offer an input; replaces (and counts as dropped) one the worker has not started yet."""
        with self._condition:
            self.submitted += 1
            if self._has_pending:
                self.dropped += 1
            self._pending, self._has_pending = item, True
            self._condition.notify()

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
            self._pending, self._has_pending = None, False
            self._condition.notify_all()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._has_pending and not self._stopping:
                    self._condition.wait()
                if self._stopping:
                    return
                item, self._pending, self._has_pending = self._pending, None, False
                self._busy = True
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
