"""Parameter tables: unique names, sane defaults, decoder defaults from DecodeConfig, and config/planner.yaml
rendered from them (values and comments: no drift)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wamdiff2_ros.decoding.config import BACKENDS, PLAN_STEPS, DecodeConfig
from wamdiff2_ros.nodes.params import (
    NODES,
    PLANNER_PARAMS,
    SCORER_PARAMS,
    Param,
    allowed_values,
    decode_config,
    image_size_hw,
    node_defaults,
    read_parameter_file,
    render_node_yaml,
    render_parameter_file,
    yaml_scalar,
)

CONFIG = Path(__file__).resolve().parents[2] / "config"
TABLES = {"wamdiff2_planner": PLANNER_PARAMS, "wamdiff2_scorer": SCORER_PARAMS}
PLANNER = {p.name: p for p in PLANNER_PARAMS}


def yaml_parameters(path: Path, node: str) -> dict:
    return yaml.safe_load(path.read_text())[f"/**/{node}"]["ros__parameters"]


@pytest.mark.parametrize("node", list(TABLES))
def test_names_are_unique(node: str) -> None:
    names = [p.name for p in TABLES[node]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("node", list(TABLES))
def test_every_default_is_within_its_own_range(node: str) -> None:
    for param in TABLES[node]:
        assert param.check(param.default) == param.default
        assert param.description.endswith("."), param.name


@pytest.mark.parametrize("node", list(TABLES))
def test_planner_yaml_lists_exactly_the_table_with_its_defaults(node: str) -> None:
    assert yaml_parameters(CONFIG / "planner.yaml", node) == {p.name: p.default for p in TABLES[node]}


def test_planner_yaml_is_the_rendering_of_the_tables_comments_included() -> None:
    """Regenerate with ``wamdiff2 params > config/planner.yaml`` after changing a table."""
    assert (CONFIG / "planner.yaml").read_text() == render_parameter_file()


@pytest.mark.parametrize("node", list(NODES))
def test_each_parameter_is_commented_with_its_description_and_allowed_values(node: str) -> None:
    text = render_node_yaml(node)
    comments = text.split("ros__parameters:\n", 1)[1].split("\n")
    name, table = NODES[node]
    assert text.startswith(f"/**/{name}:\n") and yaml.safe_load(text) == {
        f"/**/{name}": {"ros__parameters": {p.name: p.default for p in table}}
    }
    for param in table:
        line = f"    {param.name}: {yaml_scalar(param.default)}"
        block = []
        for previous in reversed(comments[: comments.index(line)]):
            if not previous.startswith("    # "):
                break
            block.insert(0, previous.removeprefix("    # "))
        assert " ".join(block) == f"{param.description} {allowed_values(param)}".strip(), param.name
        assert all(len(f"    # {b}") <= 110 for b in block), param.name


@pytest.mark.parametrize(
    ("param", "shown"),
    [
        (Param("x.mode", "", "Mode.", choices=("", "a")), '("" | a)'),
        (Param("x.count", 1, "Count.", 0, 3), "[0, 3]"),
        (Param("x.gain", 0.5, "Gain.", 0, 2), "[0.0, 2.0]"),  # shown in the parameter's own type
        (Param("x.on", True, "On."), ""),
        (Param("x.name", "a", "Name."), ""),
    ],
)
def test_allowed_values_as_the_comments_show_them(param: Param, shown: str) -> None:
    assert allowed_values(param) == shown


@pytest.mark.parametrize("value", [True, False, 0, 2**31 - 1, 0.05, 1.0, 1e-5, -2.5, "", "a: b", 'say "x"'])
def test_yaml_scalars_read_back_as_the_same_value_and_type(value) -> None:
    read = yaml.safe_load(f"k: {yaml_scalar(value)}")["k"]
    assert read == value and type(read) is type(value)


def test_decoder_parameters_take_decode_config_defaults_unless_the_node_differs_on_purpose() -> None:
    decode = DecodeConfig()
    same = {
        "decoder.block_size": decode.block_size,
        "decoder.commit_rule": decode.commit_rule,
        "decoder.cuda_graphs": decode.cuda_graphs,
        "decoder.compile": decode.compile,
        "decoder.weights": decode.weights,
        "decoder.threshold": decode.threshold,
        "decoder.max_new_tokens": decode.max_new_tokens,
        "decoder.max_step_m": decode.max_step_m,
        "candidates.seed": decode.seed,
    }
    assert {name: PLANNER[name].default for name in same} == same
    # The node's own choices, each explained where the table declares it.
    differ = {"decoder.steps": PLAN_STEPS, "decoder.backend": "sdpa", "decoder.grammar": True}
    assert {name: PLANNER[name].default for name in differ} == differ
    assert PLANNER["decoder.backend"].choices == (*BACKENDS, "auto")


def test_the_node_defaults_decode_k_candidates_on_the_fast_path_under_the_grammar() -> None:
    config = decode_config(node_defaults())
    assert (config.block_size, config.steps, config.candidates) == (32, PLAN_STEPS, 4)
    assert config.temperature == 0.7
    assert config.greedy_first and config.grammar and config.backend == "sdpa" and not config.cuda_graphs
    one = decode_config(node_defaults() | {"candidates.count": 1})
    assert (one.candidates, one.temperature, one.greedy_first) == (1, 0.0, False)  # one greedy answer


@pytest.mark.parametrize("preset", ["carla.yaml", "gpu.yaml"])
@pytest.mark.parametrize("node", list(TABLES))
def test_presets_only_override_known_parameters_with_valid_values(preset: str, node: str) -> None:
    table = {p.name: p for p in TABLES[node]}
    raw = yaml.safe_load((CONFIG / preset).read_text()).get(f"/**/{node}", {}).get("ros__parameters", {})
    for name, value in raw.items():
        assert name in table, f"{preset} sets unknown parameter {name}"
        assert type(value) is type(table[name].default) and table[name].check(value) == value
    assert read_parameter_file(CONFIG / preset, node, TABLES[node]) == raw  # the reader the CLI uses agrees


def test_gpu_preset_is_the_fast_path_with_a_warm_up() -> None:
    gpu = read_parameter_file(CONFIG / "gpu.yaml", "wamdiff2_planner", PLANNER_PARAMS)
    assert gpu == {
        "model.device": "cuda",
        "model.dtype": "bf16",
        "decoder.backend": "auto",
        "decoder.cuda_graphs": True,
        "decoder.compile": True,
        "warmup.image_size": "1920x1080",
    }
    assert read_parameter_file(CONFIG / "gpu.yaml", "wamdiff2_scorer", SCORER_PARAMS) == {}
    carla = read_parameter_file(CONFIG / "carla.yaml", "wamdiff2_planner", PLANNER_PARAMS)
    assert carla["warmup.image_size"] == "800x600"  # the bridge's rgb_front frames


@pytest.mark.parametrize(("text", "hw"), [("", None), ("1920x1080", (1080, 1920)), ("800x600", (600, 800))])
def test_warm_up_size_reads_width_by_height(text: str, hw) -> None:
    param = next(p for p in PLANNER_PARAMS if p.name == "warmup.image_size")
    assert param.check(text) == text and image_size_hw(text) == hw


@pytest.mark.parametrize("text", ["1920", "1920x", "x1080", "0x10", "1920X1080", " 1920x1080", "1920x1080x3"])
def test_warm_up_size_of_another_form_is_refused(text: str) -> None:
    param = next(p for p in PLANNER_PARAMS if p.name == "warmup.image_size")
    with pytest.raises(ValueError, match=r"parameter warmup.image_size = .*WIDTHxHEIGHT"):
        param.check(text)


def test_parameter_file_sections_nesting_and_later_values_win(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "/**:\n  ros__parameters:\n    decoder.steps: 4\n    use_sim_time: true\n"
        "/ns/wamdiff2_planner:\n  ros__parameters:\n    decoder:\n      backend: auto\n      steps: 6\n"
        "/**/wamdiff2_scorer:\n  ros__parameters:\n    agents.length_m: 5.0\n"
    )
    assert read_parameter_file(path, "wamdiff2_planner", PLANNER_PARAMS) == {  # use_sim_time is rclpy's
        "decoder.steps": 6,
        "decoder.backend": "auto",
    }


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("decoder.nonsense: 1", "has no parameter decoder.nonsense"),
        ("decoder.threshold: 1", "decoder.threshold = 1 is a int, declared as float"),
        ("decoder.steps: 100", "decoder.steps = 100: must be in"),
        ("decoder.backend: fast", "decoder.backend = 'fast': must be one of"),
    ],
)
def test_parameter_file_errors_name_the_file_and_the_parameter(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"/**/wamdiff2_planner:\n  ros__parameters:\n    {body}\n")
    with pytest.raises(ValueError, match=f"bad.yaml: .*{match}"):
        read_parameter_file(path, "wamdiff2_planner", PLANNER_PARAMS)


def test_parameter_tables_import_without_ros() -> None:
    """``wamdiff2 plan --config`` reads parameter files through this module where no ROS is installed."""
    code = "import sys, wamdiff2_ros.nodes.params; print(sorted(m for m in sys.modules if 'rcl' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("param", "value", "match"),
    [
        (Param("x.mode", "a", "Mode.", choices=("a", "b")), "c", "must be one of"),
        (Param("x.count", 1, "Count.", 0, 3), 4, "must be in \\[0, 3\\]"),
    ],
)
def test_out_of_range_values_name_the_parameter(param: Param, value, match: str) -> None:
    with pytest.raises(ValueError, match=f"parameter {param.name} = .*{match}"):
        param.check(value)


@pytest.mark.parametrize("param", [p for table in TABLES.values() for p in table if p.choices], ids=str)
def test_every_choice_reads_back_from_yaml_as_the_same_string(param: Param) -> None:
    """A choice such as ``off`` would reach the node as a boolean from a parameter file or ``--set``
    (YAML 1.1) and be refused as the wrong type."""
    for choice in param.choices:
        assert yaml.safe_load(f"k: {choice}")["k"] == choice or choice == ""
