"""What the planner reports of device memory for the node: out-of-memory errors, allocated MiB, release."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from wamdiff2_ros.decoding.planner import Planner


def planner_on(device: str) -> Planner:
    """A Planner whose model lives on ``device`` (nothing else is built: these methods need no more)."""
    planner = Planner.__new__(Planner)
    planner.loaded = SimpleNamespace(model=SimpleNamespace(device=torch.device(device)))
    return planner


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("CUDA error: out of memory"), True),  # raised as a plain RuntimeError by some kernels
        (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
        (ValueError("image too small"), False),
    ],
    ids=["torch-oom", "runtime-oom", "other-cuda-error", "input-error"],
)
def test_out_of_memory_is_recognised_by_type_or_message(error: BaseException, expected: bool) -> None:
    assert Planner.is_out_of_memory(error) is expected


def test_a_cpu_model_reports_no_device_memory_and_releases_nothing() -> None:
    planner = planner_on("cpu")
    assert planner.memory_allocated_mb() is None
    planner.release_memory()  # a no-op, never a CUDA call


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_model_reports_what_its_tensors_hold() -> None:
    planner = planner_on("cuda:0")
    torch.cuda.empty_cache()  # so that the block below takes a segment of its own
    before = planner.memory_allocated_mb()
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda:0")
    assert planner.memory_allocated_mb() - before == pytest.approx(64, abs=1)
    del block  # its 64 MiB segment stays cached by the allocator until released
    reserved = torch.cuda.memory_reserved(0)
    planner.release_memory()
    assert reserved - torch.cuda.memory_reserved(0) >= 64 * 2**20
