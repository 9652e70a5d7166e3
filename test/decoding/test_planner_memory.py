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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_forced_out_of_memory_is_recognised_released_and_planning_recovers(tokenizer) -> None:
    """CUDA out of memory for real (a per-process memory fraction with no headroom), as the node meets it: the
    error is recognised, the cache released, and the next plan works once memory is there again."""
    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.eval.plan_bench import frames
    from wamdiff2_ros.model.backbone import build_model
    from wamdiff2_ros.model.checkpoint import LoadedModel

    model = build_model("tiny", seed=0, device="cuda")
    config = DecodeConfig(block_size=8, steps=4, max_new_tokens=32, backend="sdpa", cuda_graphs=True)
    planner = Planner(LoadedModel(model=model, tokenizer=tokenizer, source="preset:tiny"), config)
    small, large = frames((180, 320), 1)[0], frames((1080, 1920), 1)[0]
    planner.plan(small)  # warm for the small frame; a large one needs new buffers
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(torch.cuda.memory_reserved(0) / total, 0)
    try:
        with pytest.raises(Exception) as caught:  # whatever type the failing kernel raises
            planner.plan(large)
        assert Planner.is_out_of_memory(caught.value), repr(caught.value)
        planner.release_memory()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
    assert planner.plan(small).decode.forwards > 0
    assert planner.plan(large).decode.forwards > 0
