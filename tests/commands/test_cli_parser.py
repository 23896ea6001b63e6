"""The command line declares only the command it is given: every command must parse and
describe itself exactly as with the whole parser (which shell completion reads)."""

from __future__ import annotations

import argparse

import pytest

from qcdoctor.engine.commands.cli import _DECLARATIONS, _parser

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
    assert {argv[0] for argv in ARGVS} == set(_DECLARATIONS)


@pytest.mark.parametrize("argv", ARGVS, ids=lambda argv: argv[0])
def test_a_command_parses_and_explains_itself_as_with_the_whole_parser(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert _parser(argv).parse_args(argv) == _parser().parse_args(argv)
    assert (_subparser(_parser(argv), argv[0]).format_help()
            == _subparser(_parser(), argv[0]).format_help())


@pytest.mark.parametrize("argv", [["--help"], ["nosuch"], []])
def test_without_a_command_every_command_is_listed(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert _parser(argv).format_help() == _parser().format_help()


def test_a_wrong_option_is_refused_as_with_the_whole_parser(capsys):
    outputs = []
    for parser in (_parser(["triage", "--bogus"]), _parser()):
        with pytest.raises(SystemExit):
            parser.parse_args(["triage", "--bogus"])
        outputs.append(capsys.readouterr().err)
    assert outputs[0] == outputs[1] and "--bogus" in outputs[0]
