"""Parameter tables: unique names, sane defaults, and config/planner.yaml in step with them (no drift)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wamdiff2_ros.nodes.params import PLANNER_PARAMS, SCORER_PARAMS, Param

CONFIG = Path(__file__).resolve().parents[2] / "config"
TABLES = {"wamdiff2_planner": PLANNER_PARAMS, "wamdiff2_scorer": SCORER_PARAMS}


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


@pytest.mark.parametrize("node", list(TABLES))
def test_carla_preset_only_overrides_known_parameters_with_valid_values(node: str) -> None:
    table = {p.name: p for p in TABLES[node]}
    for name, value in yaml_parameters(CONFIG / "carla.yaml", node).items():
        assert name in table, f"carla.yaml sets unknown parameter {name}"
        assert type(value) is type(table[name].default) and table[name].check(value) == value


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
