"""The product path on CUDA (marker ``gpu``): the graphed device loop with grammar and sampled candidates is
the eager decoder's twin, the sampler's bits are the CPU's, the frame's preprocessing on the device is the
CPU's, and a warm planner builds, captures and allocates nothing per frame."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode, planning_grammar
from wamdiff2_ros.decoding.fast_model import compiled
from wamdiff2_ros.decoding.planner import Planner
from wamdiff2_ros.decoding.sampling import uniforms
from wamdiff2_ros.eval.plan_bench import frames
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.checkpoint import LoadedModel
from wamdiff2_ros.model.image import prepare_image_tensor
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.model.prompt import detection_user_text

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run through the device tool)"),
]

# The node's decode settings: B32 S8, dynamic 0.9, K = 4 with candidate 0 greedy and the others sampled.
NODE = {
    "block_size": 32,
    "steps": 8,
    "grammar": True,
    "max_new_tokens": 128,
    "candidates": 4,
    "temperature": 0.7,
    "greedy_first": True,
    "seed": 11,
}


@pytest.fixture(scope="module")
def cuda_model():
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 twins: keep matrix products in full fp32
    return build_model("tiny", seed=0, device="cuda")


@pytest.mark.parametrize("kernel", [False, True], ids=["torch-grammar", "grammar-kernel"])
@pytest.mark.parametrize("compile", [False, True], ids=["graphs", "graphs-compile"])
@pytest.mark.parametrize("threshold", [0.9, 0.05], ids=["all-steps", "early-exit"])
def test_graphed_device_loop_with_grammar_and_candidates_gives_the_eager_tokens(
    cuda_model, tokenizer, planning_prompt, compile, threshold, kernel, monkeypatch
):
    from wamdiff2_ros.decoding import device_grammar

    monkeypatch.setattr(device_grammar, "KERNEL_ON_CUDA", kernel)  # the device loop's grammars take it
    config = DecodeConfig(**NODE, threshold=threshold)
    grammar = planning_grammar(tokenizer, config)
    eager = decode(cuda_model, tokenizer, planning_prompt, config, grammar)
    fast = DecodeConfig(**{**config.__dict__, "backend": "sdpa", "cuda_graphs": True, "compile": compile})
    graphed = decode(cuda_model, tokenizer, planning_prompt, fast, grammar)
    assert [c.token_ids for c in graphed.candidates] == [c.token_ids for c in eager.candidates]
    assert graphed.steps_per_block == eager.steps_per_block
    for candidate in graphed.candidates:
        parse_waypoints(candidate.text)  # every grammar answer parses


@pytest.mark.parametrize("draw", [0, 7])
def test_sampler_uniforms_are_the_same_bits_on_cpu_gpu_and_compiled(draw):
    seeds = torch.arange(-3, 61)
    expected = uniforms(seeds, torch.tensor(draw), 32)
    on_gpu = uniforms(seeds.cuda(), torch.tensor(draw, device="cuda"), 32)
    from_compiled = compiled(uniforms)(seeds.cuda(), torch.tensor(draw, device="cuda"), 32)
    assert torch.equal(on_gpu.cpu(), expected)
    assert torch.equal(from_compiled.cpu(), expected)


@pytest.mark.parametrize(("height", "width"), [(1080, 1920), (720, 1280), (517, 333)])
def test_preprocessing_on_the_gpu_matches_the_cpu_tensor_path(height, width):
    frame = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8))
    for budget in (12_544, 2_073_600):
        cpu = prepare_image_tensor(frame, max_pixels=budget)
        gpu = prepare_image_tensor(frame.cuda(), max_pixels=budget)
        assert torch.equal(gpu.image_grid_thw, cpu.image_grid_thw)
        # Resampling arithmetic may round a level differently on the GPU: at most one level of 255 (in
        # normalised units 2/255).
        assert float((gpu.pixel_values.cpu() - cpu.pixel_values).abs().max()) <= 2 / 255 + 1e-6


def test_a_warm_planner_builds_captures_and_allocates_nothing_per_frame(cuda_model, tokenizer):
    loaded = LoadedModel(model=cuda_model, tokenizer=tokenizer, source="preset:tiny")
    config = DecodeConfig(**{**NODE, "backend": "sdpa", "cuda_graphs": True, "max_new_tokens": 96})
    planner = Planner(loaded, config)
    planner.warm_up((360, 640), detect=True)
    builds, captures = planner.fast.builds, planner.fast.captures
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    for inputs in frames((360, 640), 5):
        output = planner.plan(inputs)
        assert all(c.waypoints_ego is not None for c in output.candidates)
    planner.detect(inputs.image_rgb, detection_user_text())
    torch.cuda.synchronize()
    assert (planner.fast.builds, planner.fast.captures) == (builds, captures)
    # Per-frame tensors (the frame, the prompt) are freed again; nothing accumulates.
    assert torch.cuda.memory_allocated() - allocated < 1 << 20


def test_the_grammar_kernel_on_cuda_is_the_torch_twin(tokenizer):
    # ``allowed`` / ``feasible`` on CUDA are the Triton kernel; their torch twins run on the same tensors.
    from wamdiff2_ros.decoding.device_grammar import DeviceGrammar
    from wamdiff2_ros.model.tokenizer import MASK_ID

    host = planning_grammar(tokenizer, DecodeConfig(min_int_digits=2, max_new_tokens=128))
    device = DeviceGrammar(host, "cuda", MASK_ID, kernel=True)
    generator = torch.Generator().manual_seed(0)
    ids = host.token_ids
    for share in (0.95, 0.6, 0.2):
        tokens = ids[torch.randint(0, len(ids), (4, 32), generator=generator)].cuda()
        masked = (torch.rand(4, 32, generator=generator) < share).cuda()
        states = torch.full((4,), host.start_state, device="cuda")
        for limit, after in ((32, 96), (20, 0)):
            budget = (torch.tensor(limit, device="cuda"), torch.tensor(after, device="cuda"))
            assert torch.equal(
                device.allowed(states, tokens, masked, *budget),
                device.reference_allowed(states, tokens, masked, *budget),
            )
            trial = tokens.repeat(8, 1)
            assert torch.equal(
                device.feasible(states.repeat(8), trial, masked.repeat(8, 1), *budget),
                device.reference_feasible(states.repeat(8), trial, masked.repeat(8, 1), *budget),
            )
