"""``cuda_graph.capture`` without a GPU: torch's stream and graph calls replaced by stand-ins, so the
collector's state around a capture is checked on the CPU."""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch

from wamdiff2_ros.decoding import cuda_graph


class _Stream:
    def wait_stream(self, other) -> None:
        pass


@pytest.fixture
def collections(monkeypatch) -> list[int]:
    """Stand-ins for the CUDA calls ``capture`` makes; returns the list ``gc.collect`` calls append to."""
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", _Stream)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool: contextlib.nullcontext())
    calls: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda: calls.append(1))
    return calls


def test_the_collector_runs_before_a_capture_and_is_held_off_during_it(collections) -> None:
    seen = []
    assert gc.isenabled()
    cuda_graph.capture(lambda: seen.append((gc.isenabled(), len(collections))), pool=(0, 0))
    # the eager warm-up with the collector on and nothing collected yet; the capture after one collection,
    # with the collector off; on again afterwards
    assert seen == [(True, 0), (False, 1)] and gc.isenabled()


def test_a_failed_capture_turns_the_collector_back_on(collections) -> None:
    calls = []

    def body() -> None:
        calls.append(gc.isenabled())
        if len(calls) == 2:
            raise RuntimeError("capture invalidated")

    with pytest.raises(RuntimeError, match="invalidated"):
        cuda_graph.capture(body, pool=(0, 0))
    assert calls == [True, False] and gc.isenabled()
