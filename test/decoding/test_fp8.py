"""FP8 weights (decoding/fp8.py) on the CPU: quantisation, the scaled-mm product against its dequantised
twin, and the lean forward and fast decode with ``weights="fp8"`` (``test_fast_gpu.py`` has the H200's)."""

from __future__ import annotations

import pytest
import torch
from interpreted import run_interpreted

from wamdiff2_ros.decoding import fp8, fp8_kernel
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.tokenizer import MASK_ID


def test_a_quantised_weight_is_within_e4m3_rounding_of_the_original() -> None:
    weight = torch.randn(48, 64, generator=torch.Generator().manual_seed(0))
    weight[3] = 0.0  # an all-zero row stays zero
    quantised = fp8.quantize_weight(weight)
    assert quantised.data.dtype == fp8.FP8 and quantised.scale.shape == (1, 48)
    restored = quantised.data.float() * quantised.scale.reshape(-1, 1)
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 for each value in the normal range of its row.
    assert ((restored - weight).abs() <= weight.abs() / 16 + quantised.scale.reshape(-1, 1) / 2**6).all()
    assert (restored[3] == 0).all()
    assert restored.abs().amax(dim=1).allclose(weight.abs().amax(dim=1))  # each row's maximum is exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_scaled_mm_product_is_its_dequantised_twin(dtype) -> None:
    generator = torch.Generator().manual_seed(1)
    weight = fp8.quantize_weight(torch.randn(96, 64, generator=generator).to(dtype))
    x = torch.randn(2, 5, 64, generator=generator).to(dtype)
    fast, twin = fp8.fp8_linear(x, weight), fp8.dequantized_linear(x, weight)
    assert fast.shape == (2, 5, 96) and fast.dtype == dtype
    assert (fast.float() - twin.float()).abs().max() <= 1e-5 * twin.float().abs().max()
    assert fp8.linear(x, weight).equal(fast)
    plain = torch.randn(96, 64, generator=generator).to(dtype)
    assert fp8.linear(x, plain).equal(torch.nn.functional.linear(x, plain))


def _block_logits(model, prompt, decoder: LeanDecoder) -> torch.Tensor:
    cache = StaticBlockCache(model, 8, 1, prompt.length, 16, decoder=decoder)
    cache.prefill(prompt)
    committed = torch.arange(198, 206)[None]
    block = torch.full((1, 8), MASK_ID)
    block[0, 0] = 198
    return head_logits(model, cache.write_and_denoise(committed, block))


def test_the_fp8_lean_forward_is_its_dequantised_twin_and_near_the_full_precision_one(
    tiny_model, planning_prompt, monkeypatch
) -> None:
    full = _block_logits(tiny_model, planning_prompt, LeanDecoder(tiny_model))
    # the unfused layers (the fused ones' twin, test_fp8_fused.py) against the dequantised products
    quantised = LeanDecoder(tiny_model, weights="fp8", fused=False)
    assert isinstance(quantised.layers[0].gate_up, fp8.Fp8Weight) and quantised.weights == "fp8"
    assert not quantised.fused and LeanDecoder(tiny_model, weights="fp8").fused
    fast = _block_logits(tiny_model, planning_prompt, quantised)
    monkeypatch.setattr(fp8, "fp8_linear", fp8.dequantized_linear)
    twin = _block_logits(tiny_model, planning_prompt, quantised)
    assert (fast - twin).abs().max() <= 1e-4 * twin.abs().max()
    relative = (fast - full).norm() / full.norm()
    assert 0 < relative < 0.1, f"fp8 logits {relative:.3g} from full precision"


def test_fp8_weights_decode_on_the_fast_path_only(tiny_model, tokenizer, planning_prompt) -> None:
    with pytest.raises(InputError, match="fast backend"):
        DecodeConfig(weights="fp8")
    with pytest.raises(InputError, match="weights"):
        DecodeConfig(backend="sdpa", weights="int4")
    config = DecodeConfig(
        block_size=8, steps=4, max_new_tokens=96, backend="sdpa", weights="fp8", grammar=True
    )
    first, again = (decode(tiny_model, tokenizer, planning_prompt, config) for _ in range(2))
    assert first.token_ids == again.token_ids and first.candidates[0].text


def test_weight_only_fp8_keeps_the_activations_and_stays_near_full_precision(tiny_model, planning_prompt):
    full = _block_logits(tiny_model, planning_prompt, LeanDecoder(tiny_model))
    decoder = LeanDecoder(tiny_model, weights="fp8_weight_only")
    assert isinstance(decoder.layers[0].qkv, fp8.Fp8WeightOnly)
    relative = (_block_logits(tiny_model, planning_prompt, decoder) - full).norm() / full.norm()
    assert 0 < relative < 0.1, f"fp8 weight-only logits {relative:.3g} from full precision"
    weight = fp8.quantize_weight_only(torch.randn(32, 16))
    x = torch.randn(3, 16)
    restored = weight.data.float() * weight.scale.reshape(-1, 1)
    assert fp8.linear(x, weight).allclose(torch.nn.functional.linear(x, restored), atol=1e-5)


INTERPRETED_TWIN = """
import torch
from wamdiff2_ros.decoding import fp8, fp8_kernel

generator = torch.Generator().manual_seed(2)
for rows, columns, depth in ((5, 48, 64), (32, 96, 256), (70, 40, 200)):  # ragged edges in every dim
    weight = fp8.quantize_weight_only(torch.randn(columns, depth, generator=generator))
    x = torch.randn(rows, depth, generator=generator).bfloat16()
    twin = fp8_kernel.w8a16_linear(x, weight.data, weight.scale).float()
    for config in (None, fp8_kernel.KernelConfig(16, 32, 64, warps=8, stages=4)):  # the default, a swept one
        kernel = fp8_kernel.launch(x, weight.data, weight.scale, config).float()
        assert (kernel - twin).abs().max() <= 2**-7 * twin.abs().max(), (rows, columns, depth, config)  # bf16
"""


def test_the_w8a16_triton_kernel_under_the_interpreter_is_its_twin():
    run_interpreted(INTERPRETED_TWIN)


def test_the_w8a16_launch_is_the_sweeps_winner_for_2b_shapes_and_a_default_elsewhere():
    assert fp8_kernel.kernel_config(32, 4096, 2048) == fp8_kernel.SWEPT[32, 4096, 2048]
    assert fp8_kernel.kernel_config(100, 2048, 6144) == fp8_kernel.SWEPT[128, 2048, 6144]  # next bucket up
    assert fp8_kernel.kernel_config(32, 96, 256) == fp8_kernel.KernelConfig(32, 16, 128)  # not swept
    assert fp8_kernel.kernel_config(512, 4096, 2048).block_m == 64  # beyond the sweep


def test_the_fp8_lm_head_scores_every_column_as_its_twin_and_leaves_a_grammars_columns(tiny_model) -> None:
    head = LeanDecoder(tiny_model, weights="fp8").head
    assert head is not None and LeanDecoder(tiny_model).head is None
    assert LeanDecoder(tiny_model, weights="fp8_weight_only").head is None
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 5, tiny_model.config.text_config.hidden_size, generator=generator)
    full = head_logits(tiny_model, hidden)
    got = fp8.answer_logits(tiny_model, hidden, None, head)
    assert got.shape == full.shape and got.dtype == torch.float32
    rows, scale = fp8.quantize_rows(hidden.reshape(-1, hidden.shape[-1]))
    twin = ((rows.float() * scale) @ (head.data.float() * head.scale.reshape(-1, 1)).T).view(full.shape)
    assert (got - twin).norm() / twin.norm() < 1e-2  # the raw product rounded to bf16
    assert 0 < (got - full).norm() / full.norm() < 0.1
    columns = torch.tensor([5, 17, 198])  # a grammar's: the model's own rows
    expected = head_logits(tiny_model, hidden, columns)
    assert torch.equal(fp8.answer_logits(tiny_model, hidden, columns, head), expected)
