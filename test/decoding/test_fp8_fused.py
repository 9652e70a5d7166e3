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
from wamdiff2_ros.decoding.fp8 import quantize_weight
from wamdiff2_ros.decoding.lean_layers import rope_angles
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
    # the gate/up product as 3 partial sums over spans of its depth (a split product)
    parts = torch.randn(3, rows, 2 * width, generator=generator) * 10
    got = fused.launch_silu_mul_quant(parts, row_scale, col_scale, block=64, dtype=torch.float32)
    expected = fused.reference_silu_mul_quant(parts, row_scale, col_scale, torch.float32)
    close(dequantised(*got), dequantised(*expected), "silu_mul_quant of partial sums")

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
# the q/k/v product as 2 partial sums over spans of its depth (a split product)
parts = torch.randn(2, *raw.shape, generator=generator) * 15
caches = [torch.zeros(rows, 12, kv_heads, dim) for _ in range(4)]
expected = fused.reference_rope_store(parts, *inputs[1:], *caches[:2], slots, heads, 1e-6)
got = fused.launch_rope_store(parts, *inputs[1:], *caches[2:], slots, heads, 1e-6)
close(got, expected, "queries of partial sums")
close(caches[2], caches[0], "keys of partial sums")
close(caches[3], caches[1], "values of partial sums")
assert fused.rope_group(32, 16, 8) == 1 and fused.rope_group(2106, 16, 8) == 8
assert fused.rope_group(2106, 4, 2) == 2

# the swap-AB product: raw (unscaled) FP8 products, a full token tile and a masked one, in fp32
for m, n, k, launch in ((32, 128, 256, (64, 128, 4, 2)), (20, 192, 128, (64, 64, 4, 2))):
    x8 = (torch.randn(m, k, generator=generator) * 30).to(fused.FP8)
    w8 = (torch.randn(n, k, generator=generator) * 30).to(fused.FP8)
    close(fused.launch_swap_product(x8, w8, launch, torch.float32), x8.float() @ w8.float().T, "swap product")

# split over the depth (2 x 2 programs, 20 rows: a masked token tile): fp32 partial sums over the spans
m, hidden, width = 20, 64, 256
m8 = (torch.randn(m, width, generator=generator) * 30).to(fused.FP8)
down = (torch.randn(hidden, width, generator=generator) * 30).to(fused.FP8)
partials = fused.launch_swap_product(m8, down, (32, 64, 4, 2), torch.float32, splits=2)
spans = zip(m8.float().chunk(2, dim=1), down.float().chunk(2, dim=1))
close(partials, torch.stack([x @ w.T for x, w in spans]), "split swap product")
scale = torch.rand(m, 1, generator=generator) * 0.01
# the next layer's add_norm_quant adds the partial sums as it adds a product
x = torch.randn(m, hidden, generator=generator)
down_scale = torch.rand(1, hidden, generator=generator) * 0.01
inputs = (x, partials, scale, down_scale, torch.rand(hidden, generator=generator) + 0.5, 1e-6)
got, expected = fused.launch_rows(*inputs, add=True, norm=True), fused.reference_add_norm_quant(*inputs)
close(got[0], expected[0], "add of partial sums")
close(dequantised(*got[1:]), dequantised(*expected[1:]), "add_norm_quant of partial sums")
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


def test_the_fused_fp8_forward_reads_every_product_split_as_the_product(
    tiny_model, planning_prompt, monkeypatch
) -> None:
    # Every product of the fused forward as 2 partial sums (the twin of SPLIT_PRODUCTS' launches, which
    # split only on CUDA): q/k/v read by rope_store, gate/up by silu_mul_quant, out and down by
    # add_norm_quant and settle, each summing them where it reads the product.
    expected, expected_keys = _logits(tiny_model, planning_prompt, LeanDecoder(tiny_model, weights="fp8"))
    products = []

    def in_two(x8, weight, dtype):
        products.append(tuple(weight.data.shape))
        return fp8_fused.swap_product(x8, weight.data, 0, 0, 0, 0, 2).to(dtype)

    monkeypatch.setattr(fp8_fused, "split_product", in_two)
    got, got_keys = _logits(tiny_model, planning_prompt, LeanDecoder(tiny_model, weights="fp8"))
    assert len(set(products)) == 4  # q/k/v, out, gate/up, down
    assert (got_keys - expected_keys).abs().max() <= 1e-5 * expected_keys.abs().max()  # sums reordered
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()


def test_the_readers_round_the_sum_of_partial_sums_to_the_activations_dtype():
    # In bf16, as on the GPU (the interpreter and the tiny model run in fp32, where no rounding shows): the
    # partial sums read as their sum rounded to bf16, exactly.
    generator = torch.Generator().manual_seed(5)
    rows, length, heads, kv_heads, dim = 1, 3, 2, 1, 16
    parts = torch.randn(2, rows, length, (heads + 2 * kv_heads) * dim, generator=generator) * 20
    summed = parts.sum(0).bfloat16()
    row_scale = torch.rand(rows * length, 1, generator=generator) * 0.1
    col_scale = torch.rand(1, parts.shape[-1], generator=generator) * 0.1
    qk_norm = (torch.rand(heads + kv_heads, dim, generator=generator) + 0.5).bfloat16()
    slots = torch.arange(length)
    cos, sin = rope_angles(slots + 3, torch.rand(dim // 2, generator=generator), torch.bfloat16)
    caches = [torch.zeros(rows, 8, kv_heads, dim, dtype=torch.bfloat16) for _ in range(4)]
    inputs = (row_scale, col_scale, qk_norm, cos, sin)
    got = fp8_fused.rope_store(parts, *inputs, *caches[:2], slots, heads, 1e-6)
    expected = fp8_fused.rope_store(summed, *inputs, *caches[2:], slots, heads, 1e-6)
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected) and torch.equal(caches[0], caches[2])
    gate_up = parts.view(2, rows * length, -1)
    scales = (row_scale, torch.rand(1, gate_up.shape[-1], generator=generator) * 0.1)
    got = fp8_fused.silu_mul_quant(gate_up, *scales, torch.bfloat16)
    expected = fp8_fused.silu_mul_quant(gate_up.sum(0).bfloat16(), *scales)
    assert all(torch.equal(a.float(), b.float()) for a, b in zip(got, expected, strict=True))


def test_the_swap_ab_product_serves_the_measured_shapes_only_and_is_scaled_mm_off_cuda(monkeypatch):
    assert fp8_fused.swap_launch(32, 12288, 2048) == fp8_fused.swap_launch(20, 12288, 2048) is not None
    assert fp8_fused.swap_launch(64, 2048, 2048) is None  # level or slower there: _scaled_mm
    assert fp8_fused.swap_launch(2106, 4096, 2048) is None and fp8_fused.swap_launch(32, 2048, 6144) is None
    generator = torch.Generator().manual_seed(1)
    x8 = torch.randn(32, 64, generator=generator).to(fp8_fused.FP8)
    weight = fp8_fused.Fp8Weight(
        torch.randn(96, 64, generator=generator).to(fp8_fused.FP8), None, torch.ones(())
    )
    monkeypatch.setattr(fp8_fused, "SWAP_AB_ON_CUDA", True)  # a CPU product stays _scaled_mm's
    twin = fp8_fused.swap_product(x8, weight.data, 64, 64, 4, 2, 1)
    assert torch.equal(fp8_fused.product(x8, weight, torch.bfloat16), twin)


def test_the_split_product_twin_settles_as_the_unsplit_product():
    generator = torch.Generator().manual_seed(3)
    m, hidden, width = 6, 32, 64
    m8 = (torch.randn(m, width, generator=generator) * 10).to(fp8_fused.FP8)
    m_scale = torch.rand(m, 1, generator=generator) * 0.1
    down = quantize_weight(torch.randn(hidden, width, generator=generator))
    x = torch.randn(m, hidden, generator=generator)
    partials = fp8_fused.swap_product(m8, down.data, 0, 0, 0, 0, 4)
    assert partials.shape == (4, m, hidden) and partials.dtype == torch.float32
    unsplit = fp8_fused.settle(x, (fp8_fused.product(m8, down, x.dtype), m_scale, down.scale))
    got = fp8_fused.settle(x, (partials, m_scale, down.scale))
    assert (got - unsplit).abs().max() <= 1e-5 * unsplit.abs().max()  # fp32 sums in another order
    assert fp8_fused.split_launch(27, 2048, 6144) == fp8_fused.split_launch(32, 2048, 6144)
    assert fp8_fused.split_launch(27, 2048, 6144) is not None
    assert fp8_fused.split_launch(256, 2048, 6144) is None


def test_the_launch_tables_compile_one_graph_for_every_prompt_length():
    # The prompt forward is compiled for every length (dynamic shapes): a table lookup on its symbolic row
    # count must not guard the graph on the count's value (it did, a recompile for each prompt length, until
    # the forty-first session), and the small-row tables must stay within the lookup's range test.
    from torch._dynamo.utils import counters

    def lookups(x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        none = (
            fp8_fused.swap_launch(rows, 12288, 2048) is None
            and fp8_fused.split_launch(rows, 2048, 6144) is None
        )
        return x * (2 if none else 3)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lookups, fullgraph=True, dynamic=True)
    for rows in (2100, 2101, 2107):
        assert torch.equal(compiled(torch.ones(rows, 2)), torch.full((rows, 2), 2.0))
    assert counters["stats"]["unique_graphs"] == 1
    assert max(tile for tile, _, _ in (*fp8_fused.SWAP_AB, *fp8_fused.SPLIT_PRODUCTS)) <= fp8_fused.SMALL_ROWS
