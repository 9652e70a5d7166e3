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
def fake_cuda(monkeypatch) -> None:
    """Stand-ins for the CUDA calls ``capture`` makes."""
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", _Stream)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool: contextlib.nullcontext())


def test_the_collector_is_held_off_during_a_capture(fake_cuda) -> None:
    seen = []
    assert gc.isenabled()
    cuda_graph.capture(lambda: seen.append(gc.isenabled()), pool=(0, 0))
    assert seen == [True, False] and gc.isenabled()  # the eager warm-up with it on, the capture with it off


def test_a_failed_capture_turns_the_collector_back_on(fake_cuda) -> None:
    calls = []

    def body() -> None:
        calls.append(gc.isenabled())
        if len(calls) == 2:
            raise RuntimeError("capture invalidated")

    with pytest.raises(RuntimeError, match="invalidated"):
        cuda_graph.capture(body, pool=(0, 0))
    assert calls == [True, False] and gc.isenabled()
