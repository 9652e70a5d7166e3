"""``wamdiff2 plan`` prints waypoints, forwards and time for an image file, as a table or JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from wamdiff2_ros.cli.main import main
from wamdiff2_ros.cli.plan import DEFAULTS, FROM_CONFIG
from wamdiff2_ros.decoding import attention
from wamdiff2_ros.decoding.attention import resolve_backend

GPU_YAML = str(Path(__file__).resolve().parents[2] / "config" / "gpu.yaml")

STATE = ["--velocity", "4.66", "-0.09", "--acceleration", "0.17", "-1.53", "--command", "right"]


@pytest.fixture(scope="module")
def image_file(tmp_path_factory, front_image):
    path = tmp_path_factory.mktemp("images") / "front.png"
    Image.fromarray(front_image).save(path)
    return str(path)


def test_plan_json_has_eight_bounded_waypoints_and_costs(image_file, capsys):
    code = main(["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "8", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    waypoints = np.array(report["waypoints"])
    assert waypoints.shape == (8, 2) and np.isfinite(waypoints).all()
    assert report["forwards"] == 1 + sum(report["steps_per_block"])
    assert report["decode_s"] > 0 and report["config"]["block_size"] == 8


def test_plan_table_lists_every_candidate(image_file, capsys):
    argv = ["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "16"]
    argv += ["--candidates", "2"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0
    assert "candidate 0 (seed 0)" in out and "candidate 1 (seed 1)" in out
    assert out.count("\n    4.0 ") == 2  # the last waypoint row of each candidate
    assert "forwards" in out and "ms/token" in out


def test_plan_reports_an_unreadable_image(tmp_path, capsys):
    bad = tmp_path / "front.png"
    bad.write_text("not an image")
    assert main(["plan", "--image", str(bad), *STATE]) == 2
    assert "cannot read image" in capsys.readouterr().err


def test_a_route_reaches_the_planner_which_refuses_it_for_a_model_of_another_rule(image_file, capsys):
    route = ["10", "0", "20", "-1", "30", "-3", "40", "-6"]
    assert main(["plan", "--image", image_file, *STATE, "--preset", "tiny", "--route", *route]) == 2
    assert "heading rule; route's shapes given: one" in capsys.readouterr().err


def test_a_route_polyline_reaches_the_planner_which_refuses_it_for_an_ego_frame_model(image_file, capsys):
    polyline = ["-10", "0", "130", "0"]  # a straight road, in the ego frame
    argv = ["plan", "--image", image_file, *STATE, "--preset", "tiny", "--route-polyline", *polyline]
    assert main(argv) == 2
    assert "ego frame; route polylines given: one" in capsys.readouterr().err


def test_plan_reports_a_missing_checkpoint(image_file, tmp_path, capsys):
    assert main(["plan", "--image", image_file, *STATE, "--checkpoint", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_backend_auto_on_the_cpu_is_sdpa(image_file, capsys):
    argv = ["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "8", "--json"]
    assert main([*argv, "--backend", "auto"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["backend"] == "sdpa"


def test_plan_takes_fp8_weights_on_the_fast_path(image_file, capsys):
    argv = ["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "8", "--json"]
    assert main([*argv, "--backend", "sdpa", "--weights", "fp8_weight_only"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["weights"] == "fp8_weight_only" and np.isfinite(report["waypoints"]).all()


def test_resolve_backend_picks_triton_then_flashinfer_where_installed_on_cuda(monkeypatch):
    assert [resolve_backend(name, "cuda") for name in ("eager", "sdpa", "flashinfer")] == [
        "eager",
        "sdpa",
        "flashinfer",
    ]
    assert resolve_backend("auto", "cpu") == "sdpa"
    find_spec = importlib.util.find_spec
    for installed, expected in (
        ((), "sdpa"),
        (("flashinfer",), "flashinfer"),
        (("triton", "flashinfer"), "triton"),
    ):
        monkeypatch.setattr(
            attention.importlib.util,
            "find_spec",
            lambda name, *rest, installed=installed: (
                (object() if name in installed else None)
                if name in ("triton", "flashinfer")
                else find_spec(name, *rest)
            ),
        )
        assert resolve_backend("auto", "cuda") == resolve_backend("auto", "cuda:1") == expected
        assert resolve_backend("auto", "cuda", "fp16") == expected
        assert resolve_backend("auto", "cuda", "fp32") == resolve_backend("auto", "cpu") == "sdpa"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_gpu_config_without_a_gpu_is_refused_naming_cuda(image_file, capsys):
    assert main(["plan", "--image", image_file, *STATE, "--preset", "tiny", "--config", GPU_YAML]) == 2
    err = capsys.readouterr().err
    assert "device 'cuda' (model.device in --config" in err and "gpu.yaml" in err
    assert "needs a CUDA GPU" in err and "--device cpu --no-cuda-graphs" in err


def test_flags_win_over_the_config_file(image_file, capsys):
    argv = ["plan", "--image", image_file, *STATE, "--preset", "tiny", "--block-size", "8", "--json"]
    argv += ["--config", GPU_YAML, "--device", "cpu", "--no-cuda-graphs", "--no-compile"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["device"], report["dtype"]) == ("cpu", "bf16")  # the flag, and gpu.yaml's dtype
    config = report["config"]
    assert (config["backend"], config["cuda_graphs"], config["compile"]) == ("sdpa", False, False)
    assert config["block_size"] == 8 and config["steps"] == DEFAULTS["steps"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/**/wamdiff2_planner:\n  ros__parameters:\n    decoder.step: 4\n", "has no parameter decoder.step"),
        ("/**/wamdiff2_scorer:\n  ros__parameters:\n    agents.length_m: 5.0\n", "sets no wamdiff2_planner"),
    ],
)
def test_a_bad_config_file_is_named(image_file, tmp_path, capsys, text: str, message: str):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    assert main(["plan", "--image", image_file, *STATE, "--preset", "tiny", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "mine.yaml" in err and message in err


def test_config_reaches_every_decoder_and_candidate_parameter():
    from wamdiff2_ros.nodes.params import PLANNER_PARAMS

    wanted = {p.name for p in PLANNER_PARAMS if p.name.startswith(("decoder.", "candidates."))}
    assert wanted | {"model.device", "model.dtype", "output.smoothing"} == set(FROM_CONFIG)
    assert set(DEFAULTS) == set(FROM_CONFIG.values()) - {"temperature"}
