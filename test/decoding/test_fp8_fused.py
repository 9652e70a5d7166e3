"""The fused W8A8 layers (decoding/fp8_fused.py) against their twins, on the CPU.

Two levels: each Triton kernel against its torch twin under Triton's interpreter (in fp32: the interpreter
rounds bf16 and e4m3 unlike a GPU, so bf16 is checked on the H200 by test_fast_gpu.py), and the fused
forward against the unfused ``fp8`` one (``fused=False``), which quantises and scales in ops of their own.
"""

from __future__ import annotations

import torch
from interpreted import run_interpreted

from wamdiff2_ros.decoding import fp8_fused
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.tokenizer import MASK_ID

KERNEL_TWINS = """
import torch
from wamdiff2_ros.decoding import fp8_fused as fused
from wamdiff2_ros.decoding.lean_layers import rope_angles

generator = torch.Generator().manual_seed(0)


def dequantised(q, scale):
    return q.float() * scale


def close(got, expected, what):
    error = (got.float() - expected.float()).abs().max().item()
    assert error <= 1e-5 * max(1.0, expected.float().abs().max().item()), (what, error)


for rows, width in ((7, 96), (3, 200)):  # a power of two's block and a ragged one
    x = torch.randn(rows, width, generator=generator)
    raw = torch.randn(rows, 2 * width, generator=generator) * 30
    row_scale = torch.rand(rows, 1, generator=generator) * 0.1
    col_scale = torch.rand(1, 2 * width, generator=generator) * 0.1
    weight = torch.rand(width, generator=generator) + 0.5
    inputs = (x, raw[:, :width], row_scale, col_scale[:, :width], weight, 1e-6)
    expected = fused.reference_add_norm_quant(*inputs)
    got = fused.launch_rows(*inputs, add=True, norm=True)
    close(got[0], expected[0], "add")
    close(dequantised(*got[1:]), dequantised(*expected[1:]), "add_norm_quant")
    close(dequantised(*fused.launch_rows(x, x, x, x, x, 0.0, add=False, norm=False)[1:]),
          dequantised(*fused.quantize_rows(x)), "quant_rows")
    for block in (fused.SILU_BLOCK, 64):  # one chunk per row, and several with a ragged last one
        close(dequantised(*fused.launch_silu_mul_quant(raw, row_scale, col_scale, block=block)),
              dequantised(*fused.reference_silu_mul_quant(raw, row_scale, col_scale)), "silu_mul_quant")

# rope_store: 2 rows x 5 tokens, 4 query / 2 KV heads of 16, written at slots 3..7 of 12
rows, length, heads, kv_heads, dim = 2, 5, 4, 2, 16
raw = torch.randn(rows, length, (heads + 2 * kv_heads) * dim, generator=generator) * 30
row_scale = torch.rand(rows * length, 1, generator=generator) * 0.1
col_scale = torch.rand(1, raw.shape[-1], generator=generator) * 0.1
qk_norm = torch.rand(heads + kv_heads, dim, generator=generator) + 0.5
slots = torch.arange(3, 3 + length)
cos, sin = rope_angles(slots + 7, 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim), torch.float32)
inputs = (raw, row_scale, col_scale, qk_norm, cos, sin)
for group in (1, 2):  # a head per program (decode), and groups of heads (a prompt)
    caches = [torch.zeros(rows, 12, kv_heads, dim) for _ in range(4)]
    expected = fused.reference_rope_store(*inputs, *caches[:2], slots, heads, 1e-6)
    got = fused.launch_rope_store(*inputs, *caches[2:], slots, heads, 1e-6, group=group)
    close(got, expected, "queries")
    close(caches[2], caches[0], "keys")
    close(caches[3], caches[1], "values")
    assert caches[0][:, 3:8].abs().sum() > 0 and caches[0][:, :3].abs().sum() == 0
assert fused.rope_group(32, 16, 8) == 1 and fused.rope_group(2106, 16, 8) == 8
assert fused.rope_group(2106, 4, 2) == 2

# the swap-AB product: raw (unscaled) FP8 products, a full token tile and a masked one, in fp32
for m, n, k, launch in ((32, 128, 256, (64, 128, 4, 2)), (20, 192, 128, (64, 64, 4, 2))):
    x8 = (torch.randn(m, k, generator=generator) * 30).to(fused.FP8)
    w8 = (torch.randn(n, k, generator=generator) * 30).to(fused.FP8)
    close(fused.launch_swap_product(x8, w8, launch, torch.float32), x8.float() @ w8.float().T, "swap product")

print("ok")
"""


def test_the_fused_kernels_under_the_interpreter_are_their_twins():
    run_interpreted(KERNEL_TWINS)


def _logits(model, prompt, decoder: LeanDecoder) -> tuple[torch.Tensor, torch.Tensor]:
    # The prompt's K/V and one fused-order forward (8 committed tokens written, a block denoised).
    cache = StaticBlockCache(model, 8, 1, prompt.length, 16, decoder=decoder)
    cache.prefill(prompt)
    committed = torch.arange(198, 206)[None]
    block = torch.full((1, 8), MASK_ID)
    block[0, 0] = 198
    logits = head_logits(model, cache.write_and_denoise(committed, block))
    return logits, cache.cache.keys[:, 0, : prompt.length + 16].clone()


QUANTIZED_ATTENTION = """
import numpy as np
import torch
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.prompt import build_planning_prompt
from wamdiff2_ros.model.tokenizer import MASK_ID, load_tokenizer

model = build_model("tiny", seed=0)
frame = np.random.default_rng(0).integers(0, 256, size=(96, 128, 3), dtype=np.uint8)
prompt = build_planning_prompt(load_tokenizer(), frame, "right", (4.66, -0.09), (0.17, -1.53))
decoder = LeanDecoder(model, weights="fp8")


class Unquantized:  # the split-keys backend without its quantising merge
    quantizes_output = False

    def __init__(self, attention):
        self.attention = attention

    def __getattr__(self, name):
        return getattr(self.attention, name)


logits = []
for hide in (False, True):
    cache = StaticBlockCache(model, 8, 2, prompt.length, 16, backend="triton", decoder=decoder)
    if hide:
        cache.attention = Unquantized(cache.attention)
    assert decoder.fused and cache.attention.quantizes_output != hide
    cache.prefill(prompt)
    block = torch.full((2, 8), MASK_ID)
    block[:, 0] = 198
    logits.append(head_logits(model, cache.denoise(block)))
assert torch.allclose(logits[0], logits[1], rtol=0, atol=1e-6), (logits[0] - logits[1]).abs().max()
print("ok")
"""


def test_the_fused_forward_takes_the_attention_output_quantised_by_the_split_keys_merge():
    # The quantising merge against the plain merge + quant_rows, on the interpreted kernels (fp32).
    run_interpreted(QUANTIZED_ATTENTION)


def test_the_fused_fp8_forward_is_the_unfused_one(tiny_model, planning_prompt) -> None:
    fused = LeanDecoder(tiny_model, weights="fp8")
    assert fused.fused and fused._between is fp8_fused.between
    got, got_keys = _logits(tiny_model, planning_prompt, fused)
    expected, expected_keys = _logits(
        tiny_model, planning_prompt, LeanDecoder(tiny_model, weights="fp8", fused=False)
    )
    # fp32: the two differ by where the scales are applied; an FP8 rounding may flip with that (1 in 16)
    assert (got_keys - expected_keys).abs().max() <= 1e-3 * expected_keys.abs().max()
    assert (got - expected).abs().max() <= 1e-3 * expected.abs().max()
    assert not LeanDecoder(tiny_model, weights="bf16").fused  # only W8A8 has fused layers


def test_the_swap_ab_product_serves_the_measured_shapes_only_and_is_scaled_mm_off_cuda(monkeypatch):
    assert fp8_fused.swap_launch(32, 12288, 2048) == fp8_fused.swap_launch(20, 12288, 2048) is not None
    assert fp8_fused.swap_launch(64, 2048, 2048) is None  # level or slower there: _scaled_mm
    assert fp8_fused.swap_launch(2106, 4096, 2048) is None and fp8_fused.swap_launch(64, 2048, 6144) is None
    assert fp8_fused.swap_launch(32, 2048, 6144) is not None  # the down product with PDL's prefetch
    generator = torch.Generator().manual_seed(1)
    x8 = torch.randn(32, 64, generator=generator).to(fp8_fused.FP8)
    weight = fp8_fused.Fp8Weight(
        torch.randn(96, 64, generator=generator).to(fp8_fused.FP8), None, torch.ones(())
    )
    monkeypatch.setattr(fp8_fused, "SWAP_AB_ON_CUDA", True)  # a CPU product stays _scaled_mm's
    twin = fp8_fused.swap_product(x8, weight.data, 64, 64, 4, 2)
    assert torch.equal(fp8_fused.product(x8, weight, torch.bfloat16), twin)


def test_the_launch_tables_compile_one_graph_for_every_prompt_length():
    # The prompt forward is compiled for every length (dynamic shapes): a table lookup on its symbolic row
    # count must not guard the graph on the count's value (it did, a recompile for each prompt length, until
    # the forty-first session), and the small-row tables must stay within the lookup's range test.
    from torch._dynamo.utils import counters

    def lookups(x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        return x * (2 if fp8_fused.swap_launch(rows, 12288, 2048) is None else 3)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lookups, fullgraph=True, dynamic=True)
    for rows in (2100, 2101, 2107):
        assert torch.equal(compiled(torch.ones(rows, 2)), torch.full((rows, 2), 2.0))
    assert counters["stats"]["unique_graphs"] == 1
    assert max(tile for tile, _, _ in fp8_fused.SWAP_AB) <= fp8_fused.SMALL_ROWS
