"""SARIF and JUnit output of triage and audit, checked with the official SARIF 2.1.0
schema and a real JUnit reader."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from urllib.parse import unquote

import jsonschema
import pytest
from junitparser import Failure, JUnitXml, Skipped

from qcdoctor.engine.cli import main
from qcdoctor.engine.examples import example_names, example_path
from qcdoctor.engine.junit import render_junit
from qcdoctor.engine.sarif import render_sarif
from qcdoctor.engine.triage import triage_path

from .conftest import missing_in_ci

# the shared folder beside the checkout; never copied into the project
SARIF_SCHEMA = Path(__file__).resolve().parents[1] / "../shared/schemas/sarif-schema-2.1.0.json"


@pytest.fixture(scope="module")
def sarif_validator():
    if not SARIF_SCHEMA.is_file():
        missing_in_ci(f"the SARIF 2.1.0 schema is missing: {SARIF_SCHEMA}")
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


@pytest.fixture(scope="module")
def reports():
    """(example, audit) -> report, every bundled example both ways, in English."""
    out = {}
    for name in example_names():
        with example_path(name) as path:
            for audit in (False, True):
                out[name, audit] = triage_path(path, lang="en", use_env=False,
                                               full_checklist=audit)
    return out


def test_sarif_of_every_example_is_valid_and_has_one_result_per_item(sarif_validator, reports):
    for (name, audit), report in reports.items():
        log = json.loads(render_sarif(report, audit=audit))
        errors = sorted(sarif_validator.iter_errors(log), key=str)
        assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
        results = log["runs"][0]["results"]
        expected = ([f"checklist/{c['id']}" for c in report["checklist"]
                     if c["status"] in ("fail", "unknown")]
                    + [p["rule"] for p in report["pitfalls"]]
                    + [f["rule"] for f in report["findings"] if f["severity"] != "info"])
        assert [r["ruleId"] for r in results] == expected, name
        rules = log["runs"][0]["tool"]["driver"]["rules"]
        assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)


def test_sarif_locations_carry_the_evidence_file_and_line(reports):
    audit = json.loads(render_sarif(reports["board_nv12_deploy", True], audit=True))
    by_rule = {r["ruleId"]: r for r in audit["runs"][0]["results"]}
    assert by_rule["checklist/input_preprocessing"]["level"] == "error"
    assert by_rule["checklist/march_consistency"]["level"] == "warning"      # unknown
    qdq = by_rule["DP054"]["locations"][0]["physicalLocation"]
    assert qdq == {"artifactLocation": {"uri": "deploy/compile_model.py", "uriBaseId": "CASEROOT"},
                   "region": {"startLine": 29}}
    triage = json.loads(render_sarif(reports["convert_quant_analysis", False]))
    by_rule = {r["ruleId"]: r for r in triage["runs"][0]["results"]}
    origin = by_rule["LY010"]["locations"][0]["physicalLocation"]
    assert origin["artifactLocation"]["uri"] == "qa_convert/compare_per_layer_out.txt"
    assert origin["region"] == {"startLine": 8}                 # row 4 is file line 8
    assert by_rule["LY020"]["level"] == "warning"               # the pitfall, with its rule


def test_sarif_of_a_case_folder_resolves_every_location(tmp_path, sarif_validator, capsys):
    with example_path("board_nv12_deploy") as source:
        shutil.copytree(source, tmp_path / "case")
    target = tmp_path / "audit.sarif"
    assert main(["audit", str(tmp_path / "case"), "--format", "sarif", "-o", str(target),
                 "--no-env", "--fail-on", "error"]) == 1          # --fail-on still applies
    log = json.loads(target.read_text(encoding="utf-8"))
    assert not list(sarif_validator.iter_errors(log))
    base = log["runs"][0]["originalUriBaseIds"]["CASEROOT"]["uri"]
    assert base == (tmp_path / "case").resolve().as_uri() + "/"
    lines = {}
    for result in log["runs"][0]["results"]:
        for place in result.get("locations", []):
            physical = place["physicalLocation"]
            file = tmp_path / "case" / unquote(physical["artifactLocation"]["uri"])
            assert file.is_file(), file
            if "region" in physical:
                lines[file.name] = len(file.read_text(encoding="utf-8").splitlines())
                assert 1 <= physical["region"]["startLine"] <= lines[file.name]
    assert {"case.yaml", "compile_model.py"} <= set(lines)


def test_junit_has_one_testcase_per_item_and_judgement(reports):
    for (name, audit), report in reports.items():
        xml = JUnitXml.fromstring(render_junit(report, audit=audit))
        suites = list(xml)
        assert len(suites) == 1
        cases = list(suites[0])
        assert len(cases) == len(report["checklist"]) + len(report["findings"]) + \
            len(report["pitfalls"]), name
        outcome = {c.name.split(":")[0]: type(c.result[0]) if c.result else None for c in cases}
        for item in report["checklist"]:
            assert outcome[item["id"]] is {"fail": Failure, "pass": None}.get(item["status"],
                                                                               Skipped), name
        for finding in report["findings"]:
            assert outcome[finding["rule"]] is (Failure if finding["severity"] == "error"
                                                else None), name
        assert suites[0].failures == sum(c["status"] == "fail" for c in report["checklist"]) + \
            sum(f["severity"] == "error" for f in report["findings"] + report["pitfalls"])


def test_junit_failure_says_why(reports):
    xml = JUnitXml.fromstring(render_junit(reports["board_nv12_deploy", True], audit=True))
    case = next(c for c in next(iter(xml)) if c.name.startswith("input_preprocessing:"))
    assert isinstance(case.result[0], Failure)
    assert "insert_image_preprocess mode matches the training colour space" in case.result[0].text


def test_junit_holds_any_user_text(reports):
    """Control characters and markup in case text still give well-formed XML."""
    report = copy.deepcopy(reports["convert_quant_analysis", False])
    report["case"]["path"] = "odd\x01<case> & ]]>"
    report["findings"][0]["text"] = "bad\x1b[31m <b>tag</b> & \ud800 end"
    xml = JUnitXml.fromstring(render_junit(report).encode("utf-8"))
    suite = next(iter(xml))
    assert suite.name == "qcdoctor triage: odd\ufffd<case> & ]]>"
    case = next(c for c in suite if c.name.startswith(report["findings"][0]["rule"] + ":"))
    assert case.result[0].text == "bad\ufffd[31m <b>tag</b> & \ufffd end"


def test_batch_writes_ci_formats_per_case(tmp_path, sarif_validator, capsys):
    for name in ("wide_gap", "board_nv12_deploy"):
        with example_path(name) as source:
            shutil.copytree(source, tmp_path / "cases" / name)
    out = tmp_path / "out"
    assert main(["audit", str(tmp_path / "cases"), "-r", "-j", "1", "--no-env",
                 "--format", "sarif", "-o", str(out)]) == 0
    for name in ("wide_gap", "board_nv12_deploy"):
        log = json.loads((out / name / "report.sarif").read_text(encoding="utf-8"))
        assert not list(sarif_validator.iter_errors(log))
    assert main(["triage", str(tmp_path / "cases"), "-r", "-j", "1", "--no-env",
                 "--format", "junit", "-o", str(tmp_path / "junit")]) == 0
    assert JUnitXml.fromfile(str(tmp_path / "junit" / "wide_gap" / "report.xml"))
