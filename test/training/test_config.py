"""Stage configs: YAML keys and overrides are checked by name and type; stage rules hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.training.config import dump_config, load_config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
BASE = "stage: adapt\nmodel: tiny\nout_dir: runs/x\ndata: {planning: p.json}\nblock_sizes: [4, 8]\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("train_*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert path.name.startswith(f"train_{config.stage}_")


def test_overrides_are_typed_and_applied(tmp_path):
    config = load_config(_write(tmp_path, BASE), ["lr=1e-4", "block_sizes=[16,32]", "progress=false"])
    assert (config.lr, config.block_sizes, config.progress) == (1e-4, [16, 32], False)


@pytest.mark.parametrize(
    ("text", "overrides", "match"),
    [
        (BASE + "learning_rate: 1.0\n", [], "unknown config keys"),
        (BASE, ["lr_max=1"], "not a config field"),
        (BASE, ["lr"], "key=value"),
        (BASE, ["max_steps=ten"], "max_steps must be"),
        (BASE, ["data={segmentation: s.json}"], "unknown tasks"),
        (BASE, ["stage=sft"], "block_sizes must be \\[1\\]"),
        (BASE, ["teacher=runs/t"], "belong to stage distill"),
        (BASE.replace("stage: adapt", "stage: distill"), ["block_sizes=[32]"], "needs a teacher"),
        (BASE, ["global_batch_size=6", "local_batch_size=4"], "multiple of local_batch_size"),
        ("stage: adapt\nmodel: tiny\n", [], "required config keys missing"),
    ],
    ids=[
        "unknown-yaml-key",
        "unknown-override",
        "override-without-value",
        "wrong-type",
        "unknown-task",
        "sft-block-size",
        "teacher-outside-distill",
        "distill-without-teacher",
        "batch-not-divisible",
        "missing-required",
    ],
)
def test_bad_configs_are_rejected(tmp_path, text, overrides, match):
    with pytest.raises(InputError, match=match):
        load_config(_write(tmp_path, text), overrides)


def test_dump_then_load_gives_an_equal_config(tmp_path):
    config = load_config(_write(tmp_path, BASE), ["epochs=3"])
    dump_config(config, tmp_path / "back.yaml")
    assert load_config(tmp_path / "back.yaml") == config
