"""Ordered results from a process pool, restarted where it stalls.

Data generation fans episodes out to worker processes and takes their results in order (the output then
does not depend on scheduling). Twice a pool has stopped giving results on a GPU machine while the same
seeds ran through in seconds on the next try (2026-12-03: forked workers exited; 2026-12-05: a fork-server
pool sat ~270 s in a 21-s step until the job's limit): a recipe job then loses the rest of its ten
minutes. Here a pool that gives no result for ``stall_s`` is terminated and a new one goes on from the
result awaited; the results stay those of the same arguments, in the same order.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
from collections.abc import Callable, Iterator
from multiprocessing.context import BaseContext
from typing import Any

log = logging.getLogger(__name__)

STALL_S = 120.0  # ~70x an expert episode on a 14-worker machine; a DAgger episode plans ~80 times
RESTARTS = 3


def ordered_results(
    context: BaseContext,
    workers: int,
    function: Callable[[Any], Any],
    argument: Callable[[int], Any],
    batch: int,
    count: int | None = None,
    stall_s: float = STALL_S,
    restarts: int = RESTARTS,
) -> Iterator[Any]:
    """``function(argument(0))``, ``function(argument(1))``, ... in order, ``count`` of them (default:
    without end), from ``workers`` processes of ``context``, ``batch`` arguments handed out at a time.

    Raises:
        multiprocessing.TimeoutError: still no new result after ``restarts`` new pools in a row.
    """
    index, stalled, stalls = 0, -1, 0
    while True:
        with context.Pool(workers) as pool:
            try:
                for start in itertools.count(index, batch):
                    end = start + batch if count is None else min(start + batch, count)
                    if start >= end:
                        return
                    results = pool.imap(function, [argument(i) for i in range(start, end)])
                    for index in range(start, end):  # noqa: B007 (a restart resumes from it)
                        yield results.next(timeout=stall_s)
            except multiprocessing.TimeoutError:
                stalls = stalls + 1 if index == stalled else 1  # stalls at the same item, in a row
                stalled = index
                if stalls > restarts:
                    raise
                log.warning("no result for %.0f s: a new pool goes on from item %d", stall_s, index)
