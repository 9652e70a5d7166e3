"""``bench plan``'s measurement: the product path per stage, warm-up apart, nothing built per frame."""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import STAGES, Planner
from wamdiff2_ros.eval.plan_bench import format_rows, frames, measure_plan
from wamdiff2_ros.model.checkpoint import LoadedModel


def test_frames_differ_and_are_seeded():
    first, again = frames((48, 64), 3), frames((48, 64), 3)
    assert all(
        (a.image_rgb == b.image_rgb).all() and a.velocity_mps == b.velocity_mps
        for a, b in zip(first, again, strict=True)
    )
    assert len({f.velocity_mps for f in first}) == 3 and first[0].image_rgb.shape == (48, 64, 3)


def test_measure_plan_times_every_stage_of_a_warm_planner(tiny_model, tokenizer):
    loaded = LoadedModel(model=tiny_model, tokenizer=tokenizer, source="preset:tiny")
    config = DecodeConfig(
        block_size=16, steps=4, max_new_tokens=96, grammar=True, backend="sdpa", candidates=2
    )
    row = measure_plan(Planner(loaded, config), (96, 128), count=3)
    assert row["frames"] == 3 and row["parsed"] == "6/6"  # the grammar: every answer parses
    assert row["builds_added"] == 0 and row["captures_added"] == 0  # the warm-up built what the frames use
    assert row["graphs_compiled_added"] == 0 and row["graphs_compiled_warmup"] >= 0
    assert row["recompiles"] == 0 and row["recompile_reasons"] == []  # nothing is compiled here
    for stage in STAGES:
        assert 0.0 <= row[stage]["p50_ms"] <= row[stage]["p99_ms"]
    assert row["total"]["p50_ms"] >= row["decode"]["p50_ms"] > 0.0
    table = format_rows([{"name": "tiny K2", **row}])
    assert table.splitlines()[2].startswith("tiny K2 | ")


def test_plan_rows_cover_k_grammar_and_sizes_and_filter_by_name():
    from wamdiff2_ros.cli.bench import plan_rows

    rows = plan_rows("quick", ["1920x1080", "1280x720"], "flashinfer", True, True)
    names = [name for name, _, _ in rows]
    assert names[:4] == [
        f"1920x1080 K{k} {tag} flashinfer graphs compile" for tag in ("grammar", "free") for k in (1, 4)
    ]
    assert names[4:] == [f"1280x720 K{k} grammar flashinfer graphs compile" for k in (1, 4)]
    only = plan_rows("quick", ["1920x1080"], "flashinfer", True, True, ["K1 grammar", "K4 free"])
    assert [name for name, _, _ in only] == [names[0], names[3]]
    assert all(settings["compile"] and settings["block_size"] == 32 for _, _, settings in only)
    fp8 = plan_rows("quick", ["1920x1080"], "triton", True, True, ["K1 grammar"], weights="fp8")
    assert [name for name, _, _ in fp8] == ["1920x1080 K1 grammar triton graphs compile fp8"]
    assert fp8[0][2]["weights"] == "fp8" and all(s["weights"] == "bf16" for _, _, s in only)
    four = plan_rows("quick", ["1920x1080"], "triton", True, True, ["K1 grammar"], steps=4)
    assert [name for name, _, _ in four] == ["1920x1080 K1 grammar triton graphs compile S4"]
    assert four[0][2]["steps"] == 4 and all(s["steps"] == 8 for _, _, s in only)


def test_recompiles_count_each_recompile_once_with_its_reason():
    # Dynamo records a reason for every cached entry on each recompile: 3 recompiles of one function are 6
    # reasons, counted here as 3, plus another function's one; compiles before ``before`` are left out.
    from wamdiff2_ros.eval.plan_bench import _guard_failures, _recompiles_fields, _recompiles_since

    def first(x):
        return x + 1

    def second(x):
        return x * x.shape[0]

    compiled_first = torch.compile(first, backend="eager", dynamic=False)
    compiled_first(torch.ones(7))
    compiled_first(torch.ones(6))  # a recompile before the count starts
    before = _guard_failures()
    compiled_second = torch.compile(second, backend="eager", dynamic=False)
    for rows in (2, 3, 4, 5):
        compiled_second(torch.ones(rows))
    compiled_first(torch.ones(8))
    fields = _recompiles_fields(_recompiles_since(before))
    assert fields["recompiles"] == 4
    assert sum(reason.startswith("second (") for reason in fields["recompile_reasons"]) == 3
    assert any("expected 4, actual 5" in reason for reason in fields["recompile_reasons"])
