"""The split-keys Triton attention against its twin, SDPA over the same cache (attention/split_keys.py).

On the CPU the kernels run under Triton's interpreter, in a process of their own (Triton reads
TRITON_INTERPRET when it is imported; requirements/dev.txt installs it, and the test is skipped where it is
absent). On a GPU, test_fast_gpu.py checks the compiled kernels against SDPA at the 2b shape.
"""

from __future__ import annotations

import importlib.util

import pytest
from interpreted import run_interpreted

from wamdiff2_ros.decoding import attention
from wamdiff2_ros.decoding.attention import make_attention, prompt_backend
from wamdiff2_ros.errors import InputError

TWIN = """
import torch
from wamdiff2_ros.decoding.attention.sdpa import SdpaAttention
from wamdiff2_ros.decoding.attention.split_keys import SplitKeysAttention
from wamdiff2_ros.decoding.fp8 import quantize_rows
from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

generator = torch.Generator().manual_seed(0)
# (rows, query heads, KV heads, head dim, B, prompt, answer slots written, queries): one and three rows,
# two and four grouped heads, a forward of B and a fused one of 2B, keys over three chunks of 128
for rows, heads, kv_heads, dim, block, prompt, written, length in (
    (1, 4, 2, 16, 8, 150, 0, 8),
    (3, 4, 2, 32, 8, 200, 16, 16),
    (2, 8, 2, 16, 32, 190, 32, 64),
):
    cache = StaticKVCache.allocate(1, rows, 300, kv_heads, dim, torch.float32, torch.device("cpu"))
    cache.keys.copy_(torch.randn(cache.keys.shape, generator=generator))
    cache.values.copy_(torch.randn(cache.values.shape, generator=generator))
    twin = StaticKVCache(cache.keys.clone(), cache.values.clone())
    twin.share_prompt(prompt)  # SDPA reads each row's own prompt; the kernels read row 0's
    q = torch.randn(rows, length, heads, dim, generator=generator)
    start = prompt + written
    kernels, sdpa = SplitKeysAttention(cache, block, heads), SdpaAttention(twin, block)
    for attention in (kernels, sdpa):
        attention.plan(start, length, prompt)
        attention.prepare(torch.tensor(start), length)
    got, expected = kernels.attend(0, q), sdpa.attend(0, q)
    error = (got - expected).abs().max().item()
    assert error < 1e-5, (rows, heads, kv_heads, dim, block, length, error)
    kernels.plan(start + block, block, prompt)  # the next forward: same buffers' length, a later slot
    kernels.prepare(torch.tensor(start + block), block)
    sdpa.prepare(torch.tensor(start + block), block)
    error = (kernels.attend(0, q[:, :block]) - sdpa.attend(0, q[:, :block])).abs().max().item()
    assert error < 1e-5, ("moved", rows, error)
    # the fused FP8 layers' variant: the merge quantises each query's row as fp8.quantize_rows does (here
    # one row; test_fp8_fused.py runs it in a two-row forward)
    if rows != 1:
        continue  # the variants below in one configuration: each launch is slow under the interpreter
    q8, scale = kernels.attend_quantized(0, q[:, :block])
    expected8, expected_scale = quantize_rows(kernels.attend(0, q[:, :block]).reshape(block, -1))
    assert torch.allclose(scale, expected_scale, rtol=1e-6), "scales"
    error = (q8.float() * scale - expected8.float() * expected_scale).abs().max().item()
    assert error < 1e-5, ("quantised", error)
    # bf16 partials (the probe's variant): the merge rounds each chunk's output once
    halved = SplitKeysAttention(cache, block, heads, partials=torch.bfloat16)
    halved.plan(start + block, block, prompt)
    halved.prepare(torch.tensor(start + block), block)
    error = (halved.attend(0, q[:, :block]) - sdpa.attend(0, q[:, :block])).abs().max().item()
    assert error < 2e-2, ("bf16 partials", error)
print("ok")
"""


def test_split_keys_kernels_under_the_interpreter_are_the_sdpa_twin():
    run_interpreted(TWIN)


def test_the_prompt_of_the_triton_backend_goes_through_a_prompt_kernel(monkeypatch):
    pytest.importorskip("triton")
    assert prompt_backend("triton", "cpu") in ("flashinfer", "sdpa")
    assert prompt_backend("triton", "cuda") == prompt_backend("flashinfer", "cuda") == "flex"
    assert prompt_backend("triton", "cuda", 2106) == "flex"  # by the prompt's length: 1080p
    assert prompt_backend("triton", "cuda", 1006) == "sdpa"  # 720p
    assert prompt_backend("sdpa", "cuda") == "sdpa" and prompt_backend("flex", "cpu") == "flex"
    find_spec = importlib.util.find_spec  # without Triton, FlexAttention cannot compile: the backend's own
    monkeypatch.setattr(
        attention.importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "triton" else find_spec(name, *rest),
    )
    assert prompt_backend("flashinfer", "cuda") == "flashinfer"
    with pytest.raises(InputError):
        make_attention("nope", None, 8, False, 4)


def test_the_kernels_refuse_a_cpu_cache_outside_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    import torch

    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cache = StaticKVCache.allocate(1, 1, 64, 2, 16, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="CUDA cache"):
        make_attention("triton", cache, 8, False, 4)
