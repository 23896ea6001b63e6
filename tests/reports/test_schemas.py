"""qcdoctor schema (generated from the validators' definitions), examples --copy, shell
completion and --version."""

from __future__ import annotations

import copy
import json
import subprocess

import jsonschema
import pytest
import yaml

from qcdoctor import __version__
from qcdoctor.collectors.case_file import parse_case
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.json_schemas import case_schema, report_schema
from qcdoctor.engine.reports.schema import check_report
from qcdoctor.errors import QcdoctorError
from tests.paths import TESTS

GOLDEN = TESTS / "golden"


def validator(schema: dict) -> jsonschema.Draft7Validator:
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def example_texts() -> dict[str, str]:
    out = {}
    for name in example_names():
        with example_path(name) as path:
            out[name] = (path / "case.yaml").read_text(encoding="utf-8")
    return out


def test_schema_command_prints_the_generated_schemas(capsys):
    for which, build in (("case", case_schema), ("report", report_schema)):
        assert main(["schema", which]) == 0
        printed = json.loads(capsys.readouterr().out)
        # the case schema's keys carry their descriptions (tests/commands/test_schema_
        # descriptions.py); without them it is the generated schema exactly
        assert _without_descriptions(printed) == build()


def _without_descriptions(schema):
    """``schema`` without its description keywords (a property named description, as
    deploy.description, stays)."""
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: ({name: _without_descriptions(s) for name, s in v.items()} if k == "properties"
                else _without_descriptions(v)) for k, v in schema.items() if k != "description"}


def test_every_example_case_fits_the_case_schema():
    check = validator(case_schema())
    for name, text in example_texts().items():
        errors = list(check.iter_errors(yaml.safe_load(text)))
        assert not errors, f"{name}: {errors[0].message}"


# (edit to a valid case, accepted?): the validator and the schema must agree on each
_BASE = {"schema": "qcdoctor/case-v1", "platform": {"chip": "J6E"},
         "stages": {"qat": {"metric": "mAP", "value": 0.45}}}
EDITS = [
    (lambda c: c.update(platfrom={"chip": "J6E"}), False),             # unknown key
    (lambda c: c["platform"].update(chp="J6E"), False),                # unknown nested key
    (lambda c: c.update(badcase="maybe"), False),                      # not a choice
    (lambda c: c["stages"]["qat"].update(value="high"), False),        # not a number
    (lambda c: c.update(tolerance={"abs": 0.01, "rel": 0.1}), False),  # one of abs / rel
    (lambda c: c.update(consistency_level=5), False),                  # above the maximum
    (lambda c: c.update(schema="qcdoctor/case-v2"), False),            # another schema
    (lambda c: c.update(retrain=True), True),                          # yes/no as a boolean
    (lambda c: c.update(higher_is_better="yes"), True),                # a flag as a word
    (lambda c: c.update(versions={"hbdk4-compiler": 4.4}), True),      # unquoted version
    (lambda c: c.update(evidence="dataset_eval"), True),               # one item for a list
    (lambda c: c.update(title=None), True),                            # null: not given
    (lambda c: c.update(deploy={"board": {"stride": 1920}}), True),     # the board's stride
    (lambda c: c.update(deploy={"board": {"stride": 0}}), False),       # not a byte count
    (lambda c: c.update(deploy={"train": {"stride": 1920}}), False),    # the board's alone
]


@pytest.mark.parametrize("edit, accepted", EDITS)
def test_validator_and_case_schema_agree(edit, accepted):
    case = copy.deepcopy(_BASE)
    edit(case)
    text = yaml.safe_dump(case)
    try:
        parse_case(text, None, None)
        by_validator = True
    except QcdoctorError:
        by_validator = False
    by_schema = validator(case_schema()).is_valid(yaml.safe_load(text))
    assert by_validator == by_schema == accepted


def test_every_golden_and_example_report_fits_the_report_schema():
    check = validator(report_schema())
    reports = {path.name: json.loads(path.read_text(encoding="utf-8"))
               for path in sorted(GOLDEN.glob("*.json"))}
    assert reports
    for name in example_names():
        with example_path(name) as path:
            for audit in (False, True):
                reports[f"{name} audit={audit}"] = triage_path(path, use_env=False,
                                                               full_checklist=audit)
    for name, report in reports.items():
        errors = list(check.iter_errors(report))
        assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
        assert check_report(report, name) is report


@pytest.mark.parametrize("edit, key", [
    (lambda r: r["conclusion"].update(stage="somewhere"), "conclusion.stage"),
    (lambda r: r.update(verdict="x"), "verdict"),
    (lambda r: r["checklist"].append({"id": "layout", "status": "maybe"}), "checklist[0].status"),
    (lambda r: r["findings"].append({"rule": "X", "severity": "fatal"}), "findings[0].severity"),
])
def test_a_damaged_report_is_refused_by_both(edit, key):
    report = json.loads((GOLDEN / "wide_gap.en.json").read_text(encoding="utf-8"))
    edit(report)
    assert not validator(report_schema()).is_valid(report)
    with pytest.raises(QcdoctorError) as caught:
        check_report(report, "r.json")
    assert caught.value.key == key and caught.value.file == "r.json"


def test_examples_copy_gives_a_case_to_start_from(tmp_path, capsys):
    target = tmp_path / "mine"
    assert main(["examples", "--copy", "board_nv12_deploy", str(target)]) == 0
    assert (target / "case.yaml").is_file() and (target / "deploy" / "compile_model.py").is_file()
    assert main(["triage", str(target), "--format", "json", "--no-env"]) == 0
    copied = json.loads(capsys.readouterr().out)
    assert main(["triage", "--example", "board_nv12_deploy", "--format", "json", "--no-env"]) == 0
    original = json.loads(capsys.readouterr().out)
    assert copied["conclusion"] == original["conclusion"]
    before = (target / "case.yaml").read_text(encoding="utf-8")
    assert main(["examples", "--copy", "wide_gap", str(target)]) == 2
    assert "not empty: nothing is copied over your files" in capsys.readouterr().err
    assert (target / "case.yaml").read_text(encoding="utf-8") == before
    assert main(["examples", "--copy", "no_such", str(tmp_path / "x")]) == 2
    assert "no example named 'no_such'" in capsys.readouterr().err


def test_bash_completion_is_valid_and_knows_the_commands(tmp_path, capsys):
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "qcdoctor.bash"
    script.write_text(capsys.readouterr().out, encoding="utf-8")
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text(encoding="utf-8")
    for command in ("triage", "audit", "diff", "pack", "schema", "examples", "completion"):
        assert command in text
    assert "--recursive" in text and "_shtab_compgen_files" in text
    assert main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith("#compdef qcdoctor")


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"qcdoctor {__version__}"
