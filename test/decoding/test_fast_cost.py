"""Cost model and benchmark plumbing: the 2b floor matches the research numbers; rows and tables are sound."""

from __future__ import annotations

import json

import pytest
import torch

from wamdiff2_ros.cli.bench import SUITES, selected, suite_rows
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.cost import block_floor_ms_per_token, forward_cost
from wamdiff2_ros.eval.speed import SpeedRow, Timing, format_table, kernel_kind, time_call, write_json
from wamdiff2_ros.model.presets import preset_config


def test_2b_forward_reads_3_44_gb_and_floors_at_0_80_ms():
    # docs/REFERENCE.md §7.2: 1.721 B text-decoder parameters, 3.44 GB bf16, 0.80 ms at 4.3 TB/s.
    cost = forward_cost(preset_config("2b").text_config, tokens=32, context=0)
    assert cost.weight_bytes == pytest.approx(3.44e9, rel=0.01)
    assert cost.floor_ms() == pytest.approx(0.80, rel=0.01)


def test_block_32_with_8_steps_floors_near_a_quarter_of_ar():
    text = preset_config("2b").text_config
    fused = block_floor_ms_per_token(text, 32, 8, context=2100, clean_pass=False)
    reference = block_floor_ms_per_token(text, 32, 8, context=2100, clean_pass=True)
    assert reference / fused == pytest.approx(9 / 8)
    assert 0.20 < fused < 0.25  # docs/REFERENCE.md §7.2: 0.20 ms/token before the K/V reads


def test_kv_bytes_grow_with_context_and_rows():
    text = preset_config("2b").text_config
    one = forward_cost(text, 32, 2000, rows=1)
    four = forward_cost(text, 32, 2000, rows=4)
    assert four.kv_bytes == 4 * one.kv_bytes == 4 * 2000 * 28 * 2 * 8 * 128 * 2


def test_time_call_reports_median_and_p99():
    timing = time_call(lambda: None, torch.device("cpu"), warmup=0, repeat=7)
    assert timing.samples == 7 and 0 <= timing.median_ms <= timing.p99_ms


@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_row_is_a_valid_decode_config(suite):
    for flashinfer in (False, True):
        for name, settings in suite_rows(suite, flashinfer):
            DecodeConfig(**settings)
            assert name


def test_the_compile_suite_times_the_headline_with_and_without_compile():
    rows = suite_rows("compile", flashinfer=True)
    names = [name for name, _ in rows]
    assert names[:4] == [
        "B32 S8 flashinfer graphs fused",
        "B32 S8 flashinfer graphs fused compile",
        "B32 S8 flashinfer graphs fused compile fp8",  # the same row with FP8 weights beside it
        "B32 S8 flashinfer graphs fused compile fp8 weight-only",
    ]
    assert dict(rows)[names[2]] == {**dict(rows)[names[1]], "weights": "fp8"}
    assert dict(rows)[names[3]] == {**dict(rows)[names[1]], "weights": "fp8_weight_only"}
    assert names[4:8] == [
        "B32 S8 triton graphs fused compile",
        "B32 S8 triton graphs fused compile fp8",
        "B32 S8 K8 triton graphs fused compile",
        "B32 S8 K8 triton graphs fused compile fp8",  # issue 19's K = 8 row on the fused FP8 layers
    ]
    assert dict(rows)[names[4]] == {**dict(rows)[names[1]], "backend": "triton"}
    assert dict(rows)[names[5]] == {**dict(rows)[names[2]], "backend": "triton"}
    assert dict(rows)[names[7]] == {**dict(rows)[names[5]], "candidates": 8}


def test_the_split_keys_rows_need_no_flashinfer():
    # `auto` picks the split-keys Triton kernels on CUDA: a machine without FlashInfer measures them too
    for flashinfer in (False, True):
        names = [name for name, _ in suite_rows("compile", flashinfer)]
        assert "B32 S8 triton graphs fused compile" in names
        assert "B32 S8 K8 triton graphs fused compile fp8" in names
    assert not any("triton" in name for name, _ in suite_rows("compile", False, graphs=False))


def test_rows_serialise_with_derived_columns(tmp_path):
    row = SpeedRow(
        name="B32 S8",
        settings={"block_size": 32},
        prompt_tokens=100,
        answer_tokens=128,
        forwards=32,
        decode=Timing(64.0, 70.0, 5),
        plan_ms=80.0,
        block_forward=Timing(1.0, 1.2, 20),
        floor_ms_per_token=0.25,
    )
    assert "B32 S8" in format_table([row])
    write_json(tmp_path / "bench.json", {"gpu": "none"}, [row], {})
    saved = json.loads((tmp_path / "bench.json").read_text())["rows"][0]
    assert (
        saved["ms_per_token"] == 0.5 and saved["tokens_per_s"] == 2000 and saved["fraction_of_floor"] == 0.5
    )


def test_cpu_rows_leave_out_cuda_graphs():
    rows = suite_rows("full", flashinfer=False, graphs=False)
    assert rows and not any(settings.get("cuda_graphs") for _, settings in rows)


def test_bench_decode_runs_end_to_end_on_the_tiny_preset(tmp_path, capsys):
    from wamdiff2_ros.cli.main import main

    out = tmp_path / "bench.json"
    argv = ["bench", "decode", "--preset", "tiny", "--device", "cpu", "--dtype", "fp32", "--image", "128x96"]
    assert main([*argv, "--max-new-tokens", "8", "--repeat", "1", "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["rows"][0]["name"].startswith("AR hf-eager") and saved["rows"][0]["answer_tokens"] == 8
    assert "ms/tok" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("nvjet_tst_128x8_64x4_1x2_h_bz_coopB_TNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "gemm"),
        ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", "attention"),
        ("triton_red_fused__softmax_0", "compiled"),
        ("void at::native::vectorized_elementwise_kernel<4, ...>", "other"),
    ],
)
def test_profile_sorts_kernels_by_kind(name, kind):
    assert kernel_kind(name) == kind


def test_only_parts_pick_rows_by_substring_or_by_their_end():
    name = "B32 S8 flashinfer graphs fused compile"
    assert selected(name, None) and selected(name, ["fused compile"])
    assert selected(name, ["S8 flashinfer graphs fused compile$"])
    assert not selected(name + " fp8", ["S8 flashinfer graphs fused compile$"])


def test_bench_kernels_turns_the_fast_paths_switches(monkeypatch):
    from wamdiff2_ros.cli.bench import set_kernel_switches
    from wamdiff2_ros.decoding import fp8_fused, pdl
    from wamdiff2_ros.errors import InputError

    monkeypatch.setattr(fp8_fused, "SWAP_AB_ON_CUDA", True)  # restored after the test
    monkeypatch.setattr(pdl, "PDL_ON_CUDA", True)
    switches = set_kernel_switches(["swap_ab=0", "pdl=0"])
    assert not fp8_fused.SWAP_AB_ON_CUDA and not pdl.PDL_ON_CUDA
    assert switches == {"swap_ab": False, "pdl": False}
    for wrong in ("unknown=1", "pdl=yes"):
        with pytest.raises(InputError):
            set_kernel_switches([wrong])
