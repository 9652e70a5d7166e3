"""The ``wamdiff2`` command: help reads well, every verb is reachable, info reports this build."""

from __future__ import annotations

import argparse
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


VERBS = ["info", "plan", "train", "sim", "eval", "bench", "bag", "demo", "params"]


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """Arguments without help, and sub-commands without a line in their parent's help, at every level."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                missing += [] if summaries.get(name) else [f"{path} {name} (no summary)"]
                missing += undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_the_parser_offers_exactly_the_verbs_in_order() -> None:
    assert list(subcommands(build_parser()).choices) == VERBS
    assert [m.rsplit(".", 1)[1].replace("_", "-") for m in VERB_MODULES] == VERBS


def test_every_verb_has_help() -> None:
    """Each verb has a line in ``wamdiff2 --help`` and a description, and every option of it is explained."""
    parser = build_parser()
    for name, sub in subcommands(parser).choices.items():
        assert sub.description, f"wamdiff2 {name} has no description"
    assert undocumented(parser, "wamdiff2") == []


def test_the_undocumented_check_finds_a_bare_option_and_a_bare_verb() -> None:
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="verb").add_parser("go", help="go somewhere")
    sub.add_argument("--far", action="store_true")
    parser._subparsers._group_actions[0].add_parser("stay")
    assert undocumented(parser, "x") == ["x go --far", "x stay (no summary)"]


def test_params_prints_the_parameter_file_or_one_node(capsys) -> None:
    from wamdiff2_ros.cli.params import NODE_CHOICES
    from wamdiff2_ros.nodes.params import NODES, render_node_yaml, render_parameter_file

    assert tuple(NODES) == NODE_CHOICES
    assert main(["params"]) == 0
    assert capsys.readouterr().out == render_parameter_file()
    assert main(["params", "--node", "scorer"]) == 0
    assert capsys.readouterr().out == render_node_yaml("scorer")


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
