"""Mistyped command lines: each is answered by the command that was typed, with its usage
and the nearest word it knows; the short forms a user reaches for are accepted."""

from __future__ import annotations

import json

import pytest

from qcdoctor.engine.commands.cli import main


def _refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        main(list(argv))
    assert stop.value.code == 2
    return capsys.readouterr().err


def test_a_mistyped_option_names_the_command_and_the_option_meant(capsys):
    err = _refused(capsys, "triage", "case", "--formt", "md")
    assert err.startswith("usage: qcdoctor triage ")
    assert "qcdoctor triage: error: unrecognized arguments: --formt md" in err
    assert "(did you mean '--format'?)" in err


def test_a_mistyped_option_of_a_nested_command_is_answered_by_it(capsys):
    err = _refused(capsys, "rules", "explain", "ST050", "--lnag", "en")
    assert err.startswith("usage: qcdoctor rules explain ")
    assert "(did you mean '--lang'?)" in err


def test_an_option_far_from_every_known_one_gets_no_guess(capsys):
    err = _refused(capsys, "audit", "case", "--zzzzzz")
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def test_a_mistyped_command_and_choice_get_the_nearest(capsys):
    assert "(did you mean 'triage'?)" in _refused(capsys, "tirage", "case")
    err = _refused(capsys, "triage", "case", "--format", "htm")
    assert "invalid choice: 'htm'" in err and "(did you mean 'html'?)" in err


def test_a_mistyped_rule_id_gets_the_nearest_id(capsys):
    assert main(["rules", "explain", "ST05"]) == 2
    err = capsys.readouterr().err
    assert "no rule 'ST05' (did you mean 'ST050'?)" in err and "rules list" in err


def test_rules_with_an_id_explains_it(capsys):
    assert main(["rules", "ST050"]) == 0
    shorthand = capsys.readouterr().out
    assert main(["rules", "explain", "ST050"]) == 0
    assert shorthand == capsys.readouterr().out and "ST050" in shorthand


@pytest.mark.parametrize("name", ["report-v1", "qcdoctor/report-v1", "report"])
def test_the_schema_is_given_by_the_name_the_help_uses(name, capsys):
    assert main(["schema", name]) == 0
    assert json.loads(capsys.readouterr().out)["title"].endswith("(qcdoctor/report-v1)")


def test_one_example_made_a_batch_says_why(capsys):
    assert main(["triage", "--example", "convert_j6p", "--format", "jsonl"]) == 2
    err = capsys.readouterr().err
    assert "--format jsonl is for several cases, --example gives one" in err
    assert "case folders beside it" not in err
