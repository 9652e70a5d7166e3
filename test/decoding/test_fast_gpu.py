"""Fast path on CUDA (marker ``gpu``; CI skips it): graphs, compile, FlashInfer against the eager decoders.

Run through the device tool: ``python -m pytest test/decoding -m gpu``. fp32 rows compare with transformers'
eager decoder token for token; FlashInfer (bf16 only, head_dim 128) is compared with SDPA on the same
static cache: logits within bf16 tolerance, and graph replay against the same backend without graphs.
Compiled bf16 code rounds fused elementwise work once instead of per op, so it too is held to bf16
tolerance; in fp32 it must give the eager tokens.
"""

from __future__ import annotations

import json

import pytest
import torch

from wamdiff2_ros.decoding.attention import prompt_backend, resolve_backend
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode, detection_grammar
from wamdiff2_ros.decoding.fast_model import LeanDecoder
from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.decoding.grammar import labels_in_prompt
from wamdiff2_ros.decoding.kv_cache import BlockCache
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.presets import preset_config
from wamdiff2_ros.model.prompt import build_planning_prompt, build_prompt, detection_user_text
from wamdiff2_ros.model.tokenizer import MASK_ID
from wamdiff2_ros.model.vocab import available_ids, reduce_vocabulary

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run through the device tool)"),
]

RULES = ["low_confidence_dynamic", "low_confidence_static", "sequential"]


@pytest.fixture(scope="module")
def cuda_model():
    # fp32 twins: keep matrix products in full fp32 (transformers' patch embedding is a cuDNN convolution)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return build_model("tiny", seed=0, device="cuda")


@pytest.fixture(scope="module")
def bf16_model():
    # Tiny, but with FlashInfer's head_dim 128 (its kernels cover 64, 128, 256).
    config = preset_config("tiny")
    config.text_config.head_dim = 128
    config.text_config.rope_parameters["mrope_section"] = [24, 20, 20]
    return build_model(config, seed=0, dtype="bf16", device="cuda")


@pytest.fixture(scope="module")
def reduced_cuda_model(cuda_model, kept_ids):
    return reduce_vocabulary(cuda_model, kept_ids)


@pytest.fixture(scope="module")
def reduced_bf16_model(bf16_model, kept_ids):
    return reduce_vocabulary(bf16_model, kept_ids)


def _decode(model, tokenizer, prompt, prebuilt=None, **settings):
    return decode(model, tokenizer, prompt, DecodeConfig(**settings), prebuilt)


@pytest.mark.parametrize("rows", [1, 4], ids=lambda k: f"K{k}")
@pytest.mark.parametrize("cache_order", ["fused", "reference"])
@pytest.mark.parametrize("rule", RULES)
def test_graphed_loop_matches_eager_transformers(
    cuda_model, tokenizer, planning_prompt, rule, cache_order, rows
):
    settings = {"block_size": 8, "steps": 4, "commit_rule": rule, "cache_order": cache_order}
    settings.update(candidates=rows, max_new_tokens=32)
    eager = _decode(cuda_model, tokenizer, planning_prompt, **settings)
    graphed = _decode(cuda_model, tokenizer, planning_prompt, backend="sdpa", cuda_graphs=True, **settings)
    assert [c.token_ids for c in graphed.candidates] == [c.token_ids for c in eager.candidates]
    assert graphed.steps_per_block == eager.steps_per_block


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"grammar": True, "max_new_tokens": 96}, id="greedy-grammar"),
        pytest.param({"temperature": 1.0, "seed": 3, "candidates": 4, "max_new_tokens": 32}, id="sampled-K4"),
        pytest.param({"block_size": 1, "steps": 1, "max_new_tokens": 24}, id="ar"),
    ],
)
def test_forward_graphs_match_eager_with_grammar_sampling_and_ar(
    cuda_model, tokenizer, planning_prompt, grammar, settings
):
    settings = {"block_size": 8, "steps": 4, **settings}
    eager = _decode(cuda_model, tokenizer, planning_prompt, grammar, **settings)
    graphed = _decode(
        cuda_model, tokenizer, planning_prompt, grammar, backend="sdpa", cuda_graphs=True, **settings
    )
    assert [c.token_ids for c in graphed.candidates] == [c.token_ids for c in eager.candidates]


@pytest.mark.parametrize("reduced", [False, True], ids=["full-vocabulary", "reduced-vocabulary"])
def test_graphed_detection_with_its_grammar_matches_eager(
    cuda_model, reduced_cuda_model, tokenizer, front_image, reduced
):
    # The bundled model's detection settings (B = 32, S = 8, dynamic rule) on both heads.
    model = reduced_cuda_model if reduced else cuda_model
    prompt = build_prompt(tokenizer, detection_user_text(), front_image)
    grammar = detection_grammar(
        tokenizer,
        DecodeConfig(max_new_tokens=160),
        labels_in_prompt(detection_user_text()),
        available_ids(model),
    )
    settings = {"block_size": 32, "steps": 8, "grammar": True, "max_new_tokens": 160}
    eager = _decode(model, tokenizer, prompt, grammar, **settings)
    graphed = _decode(model, tokenizer, prompt, grammar, backend="sdpa", cuda_graphs=True, **settings)
    assert [c.token_ids for c in graphed.candidates] == [c.token_ids for c in eager.candidates]
    assert isinstance(json.loads(eager.text.split("<|im_end|>")[0]), list)  # well-formed grounding JSON


def test_the_bundled_models_shape_takes_the_cuda_default_within_bf16_of_sdpa(planning_prompt):
    # config/gpu.yaml with no model: the bundled model's shape (heads of 16, 4 over 2) in bf16 through what
    # auto picks on CUDA, the split-keys kernels and the FlexAttention prompt (the 2b tests use heads of 128)
    pytest.importorskip("triton")
    model = build_model("tiny", seed=0, dtype="bf16", device="cuda")
    assert resolve_backend("auto", "cuda", "bf16") == "triton" and prompt_backend("triton", "cuda") == "flex"
    rows = 2
    blocks = [torch.randint(0, 151_000, (rows, 32), device="cuda") for _ in range(3)]
    blocks[2][:, ::2] = MASK_ID
    logits = {}
    for name in ("sdpa", "triton"):
        cache = StaticBlockCache(model, 32, rows, planning_prompt.length, 64, backend=name)
        cache.prefill(planning_prompt)
        cache.write(blocks[0])
        logits[name] = head_logits(model, cache.write_and_denoise(blocks[1], blocks[2]))
    error = ((logits["triton"] - logits["sdpa"]).norm() / logits["sdpa"].norm()).item()
    assert error < 2e-2, f"relative error {error:.3g}"


@pytest.mark.parametrize("size", [8, 1], ids=["B8", "B1-causal"])
@pytest.mark.parametrize("backend", ["flashinfer", "triton"])
def test_fast_attention_logits_match_sdpa_within_bf16_tolerance(bf16_model, planning_prompt, size, backend):
    # B = 1 plans one causal request per row (prompt and answer forwards) instead of one per token.
    pytest.importorskip(backend)
    rows = 2
    blocks = [torch.randint(0, 151_000, (rows, size), device="cuda") for _ in range(3)]
    blocks[2][:, ::2] = MASK_ID
    logits = {}
    for name in ("sdpa", backend):
        cache = StaticBlockCache(bf16_model, size, rows, planning_prompt.length, 32, backend=name)
        cache.prefill(planning_prompt)
        cache.write(blocks[0])
        logits[name] = head_logits(bf16_model, cache.write_and_denoise(blocks[1], blocks[2]))
    error = ((logits[backend] - logits["sdpa"]).norm() / logits["sdpa"].norm()).item()
    assert error < 2e-2, f"relative error {error:.3g}"


@pytest.mark.parametrize("rows", [1, 8], ids=lambda k: f"K{k}")
@pytest.mark.parametrize("length", [32, 64], ids=["block", "fused"])
def test_split_keys_triton_kernels_at_the_2b_shape_are_within_bf16_of_sdpa(rows, length):
    # 16 query / 8 KV heads of 128, a 2,106-token prompt in a 2,304-slot cache, B = 32: the decode's shape.
    pytest.importorskip("triton")
    from wamdiff2_ros.decoding.attention.sdpa import SdpaAttention
    from wamdiff2_ros.decoding.attention.split_keys import SplitKeysAttention
    from wamdiff2_ros.decoding.kv_buffers import StaticKVCache

    generator = torch.Generator(device="cuda").manual_seed(0)
    cache = StaticKVCache.allocate(1, rows, 2304, 8, 128, torch.bfloat16, torch.device("cuda"))
    cache.keys.normal_(generator=generator)
    cache.values.normal_(generator=generator)
    twin = StaticKVCache(cache.keys.clone(), cache.values.clone())
    prompt, start = 2106, 2106 + 64
    twin.share_prompt(prompt)
    q = torch.randn(rows, length, 16, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
    kernels, sdpa = SplitKeysAttention(cache, 32, 16), SdpaAttention(twin, 32)
    for attention in (kernels, sdpa):
        attention.plan(start, length, prompt)
        attention.prepare(torch.tensor(start, device="cuda"), length)
    error = _relative_error(kernels.attend(0, q), sdpa.attend(0, q))
    assert error < 1e-2, f"relative error {error:.3g}"


@pytest.mark.parametrize("cache_order", ["fused", "reference"])
@pytest.mark.parametrize("rows", [1, 4], ids=lambda k: f"K{k}")
@pytest.mark.parametrize("backend", ["flashinfer", "triton"])
def test_fast_attention_graphs_match_the_same_backend_without_graphs(
    bf16_model, tokenizer, planning_prompt, rows, cache_order, backend
):
    pytest.importorskip(backend)
    settings = {"block_size": 8, "steps": 4, "commit_rule": "low_confidence_static", "candidates": rows}
    settings.update(cache_order=cache_order, max_new_tokens=32, backend=backend)
    plain = _decode(bf16_model, tokenizer, planning_prompt, **settings)
    graphed = _decode(bf16_model, tokenizer, planning_prompt, cuda_graphs=True, **settings)
    assert [c.token_ids for c in graphed.candidates] == [c.token_ids for c in plain.candidates]


def test_flashinfer_decode_agrees_with_sdpa_decode(bf16_model, tokenizer, planning_prompt):
    # bf16 rounding differs between the kernels; with random weights near-ties can flip a token, after which
    # the answers legitimately diverge. Require the first block to agree.
    pytest.importorskip("flashinfer")
    settings = {"block_size": 8, "steps": 8, "commit_rule": "low_confidence_static", "max_new_tokens": 32}
    sdpa = _decode(bf16_model, tokenizer, planning_prompt, backend="sdpa", cuda_graphs=True, **settings)
    flash = _decode(
        bf16_model, tokenizer, planning_prompt, backend="flashinfer", cuda_graphs=True, **settings
    )
    assert flash.token_ids[:8] == sdpa.token_ids[:8]
    agree = sum(a == b for a, b in zip(flash.token_ids, sdpa.token_ids, strict=False))
    print(f"flashinfer vs sdpa: {agree}/{len(sdpa.token_ids)} tokens agree")


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm()).item()


@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_static"])
def test_compiled_graphed_loop_matches_eager_transformers(cuda_model, tokenizer, planning_prompt, rule):
    # K = 4 only: each new shape compiles (seconds on the device), and K = 1 adds no code path.
    settings = {"block_size": 8, "steps": 4, "commit_rule": rule, "candidates": 4, "max_new_tokens": 32}
    eager = _decode(cuda_model, tokenizer, planning_prompt, **settings)
    fast = _decode(
        cuda_model, tokenizer, planning_prompt, backend="sdpa", cuda_graphs=True, compile=True, **settings
    )
    assert [c.token_ids for c in fast.candidates] == [c.token_ids for c in eager.candidates]
    assert fast.steps_per_block == eager.steps_per_block


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compile"])
@pytest.mark.parametrize("backend", ["sdpa", "flashinfer", "flex"])
def test_lean_prefill_matches_transformers_prefill_in_bf16(bf16_model, planning_prompt, backend, compile):
    # FlashInfer rows read the prompt from row 0 (shared pages); row 1's logits check that sharing. Compiled,
    # the prefill's layers and the vision tower run Inductor's code (the layers for any prompt length).
    # ``backend`` is the prompt's; flex (prompts only) decodes the block after it through SDPA.
    if backend == "flashinfer":
        pytest.importorskip("flashinfer")
    eager = BlockCache(bf16_model, 8, rows=2)
    fast = StaticBlockCache(
        bf16_model,
        8,
        2,
        planning_prompt.length,
        32,
        backend="sdpa" if backend == "flex" else backend,  # flex rows need no FlashInfer (its JIT runs apart)
        decoder=LeanDecoder(bf16_model, compile=compile),
        vision=LeanVision(bf16_model, compile=compile, cuda_graph=compile),
        prompt_backend=backend,
    )
    eager.prefill(planning_prompt)
    fast.prefill(planning_prompt)
    for index, layer in enumerate(eager.cache.layers):
        error = _relative_error(
            fast.cache.keys[index, 0, : planning_prompt.length], layer.keys[0].transpose(0, 1)
        )
        assert error < 2e-2, f"layer {index} prompt keys: relative error {error:.3g}"
    block = torch.randint(0, 151_000, (2, 8), device="cuda")
    error = _relative_error(
        head_logits(bf16_model, fast.denoise(block)), head_logits(bf16_model, eager.denoise(block))
    )
    assert error < 2e-2, f"relative error {error:.3g}"


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compile"])
@pytest.mark.parametrize("backend", ["sdpa", "flashinfer", "flex"])
def test_graphed_text_prefill_gives_the_ungraphed_bits_one_graph_per_length(
    bf16_model, tokenizer, front_image, backend, compile
):
    # Two prompt lengths (the ego state's digits change it), each prefilled twice with other numbers of the
    # same length: a graph per length, replays on new content, and the same K/V as without graphs.
    # ``backend`` is the prompt's (flex: its block mask per length, kept for the graph).
    if backend == "flashinfer":
        pytest.importorskip("flashinfer")
    prompts = [
        build_planning_prompt(tokenizer, front_image, "left", velocity, (0.0, 0.0))
        for velocity in ((1.25, 0.0), (3.5, 0.0), (12.25, -0.5), (31.75, -0.25))
    ]
    assert prompts[0].length == prompts[1].length < prompts[2].length == prompts[3].length
    decoder = LeanDecoder(bf16_model, compile=compile)
    vision = LeanVision(bf16_model)
    caches = {
        graphs: StaticBlockCache(
            bf16_model,
            8,
            2,
            prompts[-1].length,
            32,
            "sdpa" if backend == "flex" else backend,
            graphs,
            decoder=decoder,
            vision=vision,
            prompt_backend=backend,
        )
        for graphs in (False, True)
    }
    for prompt in prompts:
        for cache in caches.values():
            cache.prefill(prompt)
        length = prompt.length
        graphed, plain = caches[True].cache, caches[False].cache
        assert torch.equal(graphed.keys[:, 0, :length], plain.keys[:, 0, :length])
        assert torch.equal(graphed.values[:, 0, :length], plain.values[:, 0, :length])
    assert len(caches[True].prompt_graphs.graphs) == 2


def test_compiled_flashinfer_graphs_match_uncompiled_within_bf16_tolerance(bf16_model, planning_prompt):
    pytest.importorskip("flashinfer")
    size, rows = 8, 4  # the shapes of the decode test below: compiled once for both
    blocks = [torch.randint(0, 151_000, (rows, size), device="cuda") for _ in range(3)]
    logits = {}
    for compile in (False, True):
        cache = StaticBlockCache(
            bf16_model, size, rows, planning_prompt.length, 32, backend="flashinfer", cuda_graphs=True,
            decoder=LeanDecoder(bf16_model, compile=compile),
        )  # fmt: skip
        cache.prefill(planning_prompt)
        cache.write(blocks[0])
        logits[compile] = head_logits(bf16_model, cache.write_and_denoise(blocks[1], blocks[2]))
    error = _relative_error(logits[True], logits[False])
    assert error < 2e-2, f"relative error {error:.3g}"


def test_compiled_flashinfer_graphed_loop_agrees_with_uncompiled(bf16_model, tokenizer, planning_prompt):
    # As FlashInfer vs SDPA: bf16 rounding may flip a near-tie later on; the first block must agree.
    pytest.importorskip("flashinfer")
    settings = {"block_size": 8, "steps": 8, "commit_rule": "low_confidence_static", "max_new_tokens": 32}
    settings.update(backend="flashinfer", cuda_graphs=True, candidates=4)
    plain = _decode(bf16_model, tokenizer, planning_prompt, **settings)
    fast = _decode(bf16_model, tokenizer, planning_prompt, compile=True, **settings)
    assert [c.token_ids[:8] for c in fast.candidates] == [c.token_ids[:8] for c in plain.candidates]


@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_static"])
def test_reduced_vocabulary_compiled_graphed_loop_matches_eager(
    reduced_cuda_model, tokenizer, planning_prompt, grammar, rule
):
    # The scattered head (kept rows' logits, -inf elsewhere) in graphs and compiled code, with the grammar.
    settings = {"block_size": 8, "steps": 4, "commit_rule": rule, "candidates": 4, "max_new_tokens": 96}
    settings.update(temperature=1.0, seed=3)
    eager = _decode(reduced_cuda_model, tokenizer, planning_prompt, grammar, **settings)
    settings.update(backend="sdpa", cuda_graphs=True, compile=True)
    fast = _decode(reduced_cuda_model, tokenizer, planning_prompt, grammar, **settings)
    assert [c.token_ids for c in fast.candidates] == [c.token_ids for c in eager.candidates]


def test_reduced_vocabulary_flashinfer_graphs_match_flashinfer_without_graphs(
    reduced_bf16_model, tokenizer, planning_prompt
):
    pytest.importorskip("flashinfer")
    settings = {"block_size": 8, "steps": 4, "commit_rule": "low_confidence_static", "candidates": 4}
    settings.update(max_new_tokens=32, backend="flashinfer")
    plain = _decode(reduced_bf16_model, tokenizer, planning_prompt, **settings)
    graphed = _decode(reduced_bf16_model, tokenizer, planning_prompt, cuda_graphs=True, **settings)
    assert [c.token_ids for c in graphed.candidates] == [c.token_ids for c in plain.candidates]


@pytest.mark.parametrize("rows", [32, 128])
def test_fp8_scaled_mm_on_cuda_is_its_dequantised_twin(rows):
    from wamdiff2_ros.decoding import fp8

    generator = torch.Generator(device="cuda").manual_seed(0)
    weight = fp8.quantize_weight(torch.randn(512, 256, device="cuda", generator=generator).bfloat16())
    x = torch.randn(rows, 256, device="cuda", generator=generator).bfloat16()
    error = _relative_error(fp8.fp8_linear(x, weight), fp8.dequantized_linear(x, weight))
    assert error < 1e-2, f"relative error {error:.3g}"


@pytest.mark.parametrize("rows", [32, 256])  # K = 1 and K = 8 blocks of 32
def test_the_fp8_lm_head_at_the_2b_shape_is_its_dequantised_twin_compiled_or_not(rows):
    from wamdiff2_ros.decoding import fp8
    from wamdiff2_ros.decoding.fast_model import compiled

    generator = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(151_936, 2048, device="cuda", generator=generator).bfloat16() * 0.02
    head = fp8.quantize_weight(weight)
    hidden = torch.randn(1, rows, 2048, device="cuda", generator=generator).bfloat16()
    got = fp8.answer_logits(None, hidden, None, head)  # the model is read only for a grammar's columns
    q, scale = fp8.quantize_rows(hidden[0])
    twin = (q.float() * scale) @ (head.data.float() * head.scale.reshape(-1, 1)).T
    assert got.shape == (1, rows, 151_936) and _relative_error(got[0], twin) < 1e-2
    top = compiled(lambda h: fp8.answer_logits(None, h, None, head).argmax(-1))(hidden)
    assert torch.equal(top, got.argmax(-1))


def test_compiled_graphed_fp8_forward_matches_uncompiled_fp8_and_stays_near_bf16(bf16_model, planning_prompt):
    size, rows = 8, 4
    blocks = [torch.randint(0, 151_000, (rows, size), device="cuda") for _ in range(3)]
    logits = {}
    for name, compile, weights in (
        ("bf16", False, "bf16"),
        ("fp8", False, "fp8"),
        ("fp8 compiled", True, "fp8"),
    ):
        cache = StaticBlockCache(
            bf16_model, size, rows, planning_prompt.length, 32, backend="sdpa", cuda_graphs=compile,
            decoder=LeanDecoder(bf16_model, compile=compile, weights=weights),
        )  # fmt: skip
        cache.prefill(planning_prompt)
        cache.write(blocks[0])
        logits[name] = head_logits(bf16_model, cache.write_and_denoise(blocks[1], blocks[2]))
    # Compiled, the activations are quantised from fp32 where the eager code rounds them to bf16 first:
    # some take the next e4m3 value (1/16 apart), so the two FP8 paths differ by a few percent.
    assert _relative_error(logits["fp8 compiled"], logits["fp8"]) < 5e-2
    error = _relative_error(logits["fp8"], logits["bf16"])
    assert 0 < error < 0.1, f"fp8 logits {error:.3g} from bf16"


@pytest.mark.parametrize("weights", ["fp8", "fp8_weight_only"])
def test_compiled_fp8_graphed_loop_agrees_with_uncompiled_fp8(
    bf16_model, tokenizer, planning_prompt, weights
):
    settings = {"block_size": 8, "steps": 8, "commit_rule": "low_confidence_static", "max_new_tokens": 32}
    settings.update(backend="sdpa", cuda_graphs=True, candidates=4, weights=weights)
    plain = _decode(bf16_model, tokenizer, planning_prompt, **settings)
    fast = _decode(bf16_model, tokenizer, planning_prompt, compile=True, **settings)
    assert [c.token_ids[:8] for c in fast.candidates] == [c.token_ids[:8] for c in plain.candidates]


@pytest.mark.parametrize("rows", [32, 128, 256])
@pytest.mark.parametrize("shape", [(4096, 2048), (2048, 6144), (1000, 72)], ids=["qkv", "down", "ragged"])
def test_w8a16_kernel_on_cuda_is_its_dequantised_twin(rows, shape):
    from wamdiff2_ros.decoding import fp8, fp8_kernel

    generator = torch.Generator(device="cuda").manual_seed(0)
    weight = fp8.quantize_weight_only(torch.randn(*shape, device="cuda", generator=generator).bfloat16())
    x = torch.randn(rows, shape[1], device="cuda", generator=generator).bfloat16()
    twin = torch.nn.functional.linear(x.float(), weight.data.float() * weight.scale.reshape(-1, 1))
    error = _relative_error(fp8_kernel.w8a16_linear(x, weight.data, weight.scale), twin)
    assert error < 1e-2, f"relative error {error:.3g}"


@pytest.mark.parametrize("rows", [32, 64, 2106])
def test_fused_fp8_kernels_at_the_2b_shape_match_their_twins(rows):
    # bf16 on the GPU (the CPU test checks fp32 under the interpreter): the normed or SiLU rows may round
    # to the next bf16 value, and their e4m3 codes with them, so the dequantised outputs are held to 1 %.
    from wamdiff2_ros.decoding import fp8_fused as fused
    from wamdiff2_ros.decoding.lean_layers import rope_angles

    generator = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=generator) * scale).bfloat16()

    def dequantised(q, scale):
        return q.float() * scale

    x, raw = randn(rows, 2048), randn(rows, 12288, scale=300)
    row_scale = torch.rand(rows, 1, device="cuda", generator=generator) * 0.01
    col_scale = torch.rand(1, 12288, device="cuda", generator=generator) * 0.01
    weight = randn(2048) + 1
    got = fused.add_norm_quant(x, raw[:, :2048].contiguous(), row_scale, col_scale[:, :2048], weight, 1e-6)
    expected = fused.reference_add_norm_quant(x, raw[:, :2048], row_scale, col_scale[:, :2048], weight, 1e-6)
    assert _relative_error(got[0], expected[0]) < 1e-2
    assert _relative_error(dequantised(*got[1:]), dequantised(*expected[1:])) < 1e-2
    assert _relative_error(dequantised(*fused.quant_rows(x)), dequantised(*fused.quantize_rows(x))) < 1e-2
    got = dequantised(*fused.silu_mul_quant(raw, row_scale, col_scale))
    assert (
        _relative_error(got, dequantised(*fused.reference_silu_mul_quant(raw, row_scale, col_scale))) < 1e-2
    )
    # rope_store: 16 query / 8 KV heads of 128 at slots from 100
    qkv = randn(1, rows, 4096, scale=300)
    col_scale = torch.rand(1, 4096, device="cuda", generator=generator) * 0.01
    qk_norm = randn(24, 128) + 1
    slots = torch.arange(100, 100 + rows, device="cuda")
    inverse = 1.0 / 1e6 ** (torch.arange(0, 128, 2, device="cuda").float() / 128)
    cos, sin = rope_angles(slots, inverse, torch.bfloat16)
    caches = [torch.zeros(1, rows + 200, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    got = fused.rope_store(qkv, row_scale, col_scale, qk_norm, cos, sin, *caches[:2], slots, 16, 1e-6)
    expected = fused.reference_rope_store(
        qkv, row_scale, col_scale, qk_norm, cos, sin, *caches[2:], slots, 16, 1e-6
    )
    assert got.shape == (1, rows, 16, 128) and got.is_contiguous()
    for fast, twin in ((got, expected), (caches[0], caches[2]), (caches[1], caches[3])):
        assert _relative_error(fast, twin) < 1e-2


def test_fused_fp8_forward_matches_the_unfused_one_graphed_and_compiled(bf16_model, planning_prompt):
    size, rows = 8, 4
    blocks = [torch.randint(0, 151_000, (rows, size), device="cuda") for _ in range(3)]
    logits = {}
    for name, compile, fused, backend in (
        ("unfused", False, False, "sdpa"),
        ("fused", False, True, "sdpa"),
        ("fused compiled", True, True, "sdpa"),
        ("fused compiled split keys", True, True, "triton"),  # the merge kernel quantises the output
    ):
        cache = StaticBlockCache(
            bf16_model, size, rows, planning_prompt.length, 32, backend=backend, cuda_graphs=True,
            decoder=LeanDecoder(bf16_model, compile=compile, weights="fp8", fused=fused),
            prompt_backend="sdpa",
        )  # fmt: skip
        assert getattr(cache.attention, "quantizes_output", False) == (backend == "triton")
        cache.prefill(planning_prompt)
        cache.write(blocks[0])
        logits[name] = head_logits(bf16_model, cache.write_and_denoise(blocks[1], blocks[2]))
    # The fused layers round each raw product to bf16 before its scales: a few e4m3 codes move.
    assert _relative_error(logits["fused"], logits["unfused"]) < 5e-2
    assert _relative_error(logits["fused compiled"], logits["fused"]) < 1e-2
    assert _relative_error(logits["fused compiled split keys"], logits["fused compiled"]) < 5e-2


def test_swap_ab_products_at_the_2b_shapes_are_scaled_mm_s():
    from wamdiff2_ros.decoding import fp8_fused as fused

    generator = torch.Generator(device="cuda").manual_seed(0)
    one = torch.ones((), device="cuda")
    for (tile, n, k), launch in fused.SWAP_AB.items():
        for m in (tile, tile - 5):  # a full token tile and a masked one
            x8 = torch.randn(m, k, device="cuda", generator=generator).to(fused.FP8)
            w8 = (torch.randn(n, k, device="cuda", generator=generator) * 0.05).to(fused.FP8)
            got = fused.swap_product(x8, w8, *launch)
            twin = torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            assert _relative_error(got, twin) < 1e-2, (tile, n, k, m)


def test_the_fused_fp8_forward_with_swap_ab_products_is_the_one_without(
    bf16_model, planning_prompt, monkeypatch
):
    from wamdiff2_ros.decoding import fp8_fused as fused

    def every_shape(m, n, k):  # the tiny model's products through the swap-AB kernel too
        return (64, 64, 4, 3) if m <= 64 and n % 64 == 0 and k % 64 == 0 else None

    monkeypatch.setattr(fused, "swap_launch", every_shape)
    _assert_same_fp8_forward_with_and_without(bf16_model, planning_prompt, monkeypatch, "SWAP_AB_ON_CUDA")


def test_the_fused_fp8_forward_launched_with_pdl_is_the_one_without(bf16_model, planning_prompt, monkeypatch):
    from wamdiff2_ros.decoding import pdl

    monkeypatch.setattr(pdl, "PDL_ON_CUDA", True)
    if not pdl.launch_options(torch.device("cuda"), 32)["PDL"]:
        pytest.skip("PDL needs a Hopper or later GPU")
    assert not pdl.launch_options(torch.device("cuda"), pdl.PDL_MAX_ROWS + 1)["PDL"]
    logits = _assert_same_fp8_forward_with_and_without(
        bf16_model, planning_prompt, monkeypatch, "PDL_ON_CUDA", module=pdl
    )
    assert torch.equal(logits[True], logits[False])  # the same kernels in the same order


def _assert_same_fp8_forward_with_and_without(model, prompt, monkeypatch, switch: str, module=None) -> dict:
    # The compiled, graphed fused FP8 forward (4 rows, a block of 8 written and one denoised) with the
    # kernels ``<module>.<switch>`` turns on (``fp8_fused`` by default) and without: the raw products are
    # summed in another order, so a bf16 rounding and with it an e4m3 code may move. -> both logits.
    from wamdiff2_ros.decoding import fp8_fused as fused

    module = module or fused

    size, rows = 8, 4
    blocks = [torch.randint(0, 151_000, (rows, size), device="cuda") for _ in range(3)]
    logits = {}
    for on in (False, True):
        monkeypatch.setattr(module, switch, on)
        cache = StaticBlockCache(
            model, size, rows, prompt.length, 32, backend="triton", cuda_graphs=True,
            decoder=LeanDecoder(model, compile=True, weights="fp8"), prompt_backend="sdpa",
        )  # fmt: skip
        cache.prefill(prompt)
        cache.write(blocks[0])
        logits[on] = head_logits(model, cache.write_and_denoise(blocks[1], blocks[2]))
    assert _relative_error(logits[True], logits[False]) < 2e-2
    return logits
