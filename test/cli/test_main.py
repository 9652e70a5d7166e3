"""The ``wamdiff2`` command: help reads well, every verb is reachable, info reports this build."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wamdiff2_ros.cli.main import VERB_MODULES, build_parser, main

MESSAGES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "msg").glob("*.msg"))


def test_help_lists_every_verb(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for module in VERB_MODULES:
        assert module.rsplit(".", 1)[1].replace("_", "-") in text


def test_every_verb_has_help() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "verb")
    for name, sub in subparsers.choices.items():
        assert sub.format_help().strip(), name


def test_missing_verb_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2


def test_info_reports_every_message_with_its_type_hash(capsys) -> None:
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(name.rsplit("/", 1)[1] for name in report["messages"]) == MESSAGES
    assert all(h.startswith("RIHS01_") for h in report["messages"].values())


def test_parser_builds_without_importing_torch() -> None:
    """``wamdiff2 --help`` stays fast: verbs import torch inside their function, not at module level."""
    code = "import sys; from wamdiff2_ros.cli import main; main.build_parser(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split()[-1] == "False"
