"""The command line declares only the command it is given: every command must parse and
describe itself exactly as with the whole parser (which shell completion reads)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from qcdoctor.engine.commands import cli
from qcdoctor.engine.commands.cli import COMMANDS, build_parser

ARGVS = [
    ["triage", "case", "--format", "html", "-o", "r.html", "--lang", "en", "--fail-on", "error",
     "--no-env", "--allow-outside", "/data", "-j", "2", "-r", "--color", "never"],
    ["triage", "--example", "convert_j6e_no_retrain"],
    ["audit", "a", "b", "--format", "sarif", "--trust-pickles"],
    ["intake", "case", "--answers", "answers.yaml", "--lang", "zh"],
    ["compare", "left.npy", "right.npy", "--decimals", "3", "--format", "json"],
    ["diff", "old.json", "new", "--fail-on", "regression"],
    ["pack", "case", "-o", "b.tar.gz", "--max-file-size", "10M"],
    ["examples", "--copy", "convert_j6e_no_retrain", "here"],
    ["schema", "report"],
    ["completion", "zsh"],
    ["probe", "--baseline", "m:f", "--analysis", "m:q", "--inputs", "x.pt", "--out", "o",
     "--metric", "KL"],
    ["collect", "case", "--format", "json"],
    ["rules", "explain", "ST050", "--lang", "zh"],
    ["rules", "docs", "-o", "rules.md"],
]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_every_command_is_covered():
    assert {argv[0] for argv in ARGVS} == set(COMMANDS)


def test_every_command_module_is_listed_and_complete():
    """A module of engine/commands/ that declares a command is on the command line, and a
    listed command has its help, its options and its run."""
    folder = Path(cli.__file__).parent
    declaring = {path.stem for path in folder.glob("*.py")
                 if "\nABOUT = " in path.read_text(encoding="utf-8")}
    assert declaring == {module.__name__.rpartition(".")[2] for module in COMMANDS.values()}
    for name, module in COMMANDS.items():
        assert module.ABOUT["help"] and callable(module.declare) and callable(module.run), name


@pytest.mark.parametrize("argv", ARGVS, ids=lambda argv: argv[0])
def test_a_command_parses_and_explains_itself_as_with_the_wholebuild_parser(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert build_parser(argv).parse_args(argv) == build_parser().parse_args(argv)
    assert (_subparser(build_parser(argv), argv[0]).format_help()
            == _subparser(build_parser(), argv[0]).format_help())


@pytest.mark.parametrize("argv", [["--help"], ["nosuch"], []])
def test_without_a_command_every_command_is_listed(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert build_parser(argv).format_help() == build_parser().format_help()


def test_a_wrong_option_is_refused_as_with_the_wholebuild_parser(capsys):
    outputs = []
    for parser in (build_parser(["triage", "--bogus"]), build_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args(["triage", "--bogus"])
        outputs.append(capsys.readouterr().err)
    assert outputs[0] == outputs[1] and "--bogus" in outputs[0]
