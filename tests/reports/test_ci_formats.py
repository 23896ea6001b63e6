"""SARIF and JUnit output of triage and audit, checked with the official SARIF 2.1.0
schema and a real JUnit reader."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import jsonschema
import pytest
from junitparser import Failure, JUnitXml, Skipped

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.diagnose import SEVERITY_RANK, fails_on
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.junit import render_junit
from qcdoctor.engine.reports.sarif import render_sarif
from tests.conftest import missing_in_ci
from tests.paths import TESTS

# the official schema, unchanged (tests/schemas/README.md): the tests need no folder beside
# the checkout
SARIF_SCHEMA = TESTS / "schemas" / "sarif-schema-2.1.0.json"


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
        conclusion = report["conclusion"]["evidence"][0]["severity"] != "info"
        expected = ([f"conclusion/{report['conclusion']['stage']}"] * conclusion
                    + [f"checklist/{c['id']}" for c in report["checklist"]
                     if c["status"] in ("fail", "unknown")]
                    + [p["rule"] for p in report["pitfalls"] + report["cautions"]]
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
        assert len(cases) == 1 + len(report["checklist"]) + len(report["findings"]) + \
            len(report["pitfalls"]) + len(report["cautions"]), name
        outcome = {c.name.split(":")[0]: type(c.result[0]) if c.result else None for c in cases}
        for item in report["checklist"]:
            assert outcome[item["id"]] is {"fail": Failure, "pass": None}.get(item["status"],
                                                                               Skipped), name
        for finding in report["findings"]:
            assert outcome[finding["rule"]] is (Failure if finding["severity"] == "error"
                                                else None), name
        assert suites[0].failures == sum(c["status"] == "fail" for c in report["checklist"]) + \
            sum(f["severity"] == "error"
                for f in report["findings"] + report["pitfalls"] + report["cautions"]
                + report["conclusion"]["evidence"][:1])


def test_junit_failure_says_why(reports):
    xml = JUnitXml.fromstring(render_junit(reports["board_nv12_deploy", True], audit=True))
    case = next(c for c in next(iter(xml)) if c.name.startswith("input_preprocessing:"))
    assert isinstance(case.result[0], Failure)
    assert "insert_image_preprocess mode is yuvbt601full2bgr" in case.result[0].text


def test_junit_holds_any_user_text(reports):
    """Control characters and markup in case text still give well-formed XML."""
    report = copy.deepcopy(reports["convert_quant_analysis", False])
    report["case"]["path"] = "odd\x01<case> & ]]>"
    report["findings"][0]["text"] = "bad\x1b[31m <b>tag</b> & \ud800 end"
    xml = JUnitXml.fromstring(render_junit(report).encode("utf-8"))
    suite = next(iter(xml))
    assert suite.name == "qcdoctor triage: odd\ufffd<case> & ]]>"
    case = next(c for c in suite if c.name.startswith(report["findings"][0]["rule"] + ":"))
    # a lone surrogate is shown as its escape, as in every output (common/safe_text.py)
    assert case.result[0].text == "bad\ufffd[31m <b>tag</b> & \\ud800 end"


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


def _case_with_script(tmp_path: Path, script: str) -> Path:
    """board_nv12_deploy with its compile script at ``script`` (case.yaml says so)."""
    with example_path("board_nv12_deploy") as source:
        shutil.copytree(source, tmp_path / "case")
    case = tmp_path / "case"
    if not script.startswith("../"):
        (case / script).parent.mkdir(parents=True, exist_ok=True)
    (case / "deploy" / "compile_model.py").rename(case / script)
    text = (case / "case.yaml").read_text(encoding="utf-8")
    (case / "case.yaml").write_text(text.replace("script: deploy/compile_model.py",
                                                 f"script: {json.dumps(script)}"),
                                    encoding="utf-8")
    return case


def _sarif_of(case: Path, *extra: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "qcdoctor", "audit", str(case), "--format",
                           "sarif", "--no-env", "--lang", "en", *extra], cwd=case.parent,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    return json.loads(done.stdout)


def _places(log: dict) -> list[dict]:
    return [place["physicalLocation"] for result in log["runs"][0]["results"]
            for place in result.get("locations", [])]


@pytest.mark.parametrize("script", ["deploy/x;/etc/passwd.py", "deploy/my script.py",
                                    "deploy/#1 100% line 3.py"])
def test_sarif_locations_are_data_never_parsed_from_text(tmp_path, sarif_validator, script):
    """A script's name is carried as it is: no ';' splits it, no space cuts it, it never
    becomes absolute; every location is relative to the case root and within it."""
    case = _case_with_script(tmp_path, script)
    log = _sarif_of(case)
    assert not list(sarif_validator.iter_errors(log))
    places = _places(log)
    for physical in places:
        artifact = physical["artifactLocation"]
        assert artifact["uriBaseId"] == "CASEROOT" and urlsplit(artifact["uri"]).scheme == ""
        assert not artifact["uri"].startswith("/") and ".." not in artifact["uri"].split("/")
        assert (case / unquote(artifact["uri"])).is_file(), artifact
    by_uri: dict[str, set] = {}
    for physical in places:
        by_uri.setdefault(physical["artifactLocation"]["uri"], set()).add(
            physical.get("region", {}).get("startLine"))
    assert set(by_uri) == {"case.yaml", quote(script)}
    # the script's own lines: the inserted pre-processing (17), the qdq removal (29)
    assert by_uri[quote(script)] == {None, 17, 29}
    assert "file://" not in json.dumps(log["runs"][0]["results"])


def test_sarif_never_locates_a_file_outside_the_case(tmp_path, sarif_validator):
    outside = tmp_path / "outside"
    outside.mkdir()
    case = _case_with_script(tmp_path, "../outside/compile_model.py")
    for allowed in (True, False):
        log = _sarif_of(case, *(["--allow-outside", str(outside)] if allowed else []))
        assert not list(sarif_validator.iter_errors(log))
        assert {p["artifactLocation"]["uri"] for p in _places(log)} == {"case.yaml"}
        results = json.dumps(log["runs"][0]["results"])
        assert "file://" not in results
        # read when allowed (its findings are there, without a place outside the case),
        # else refused: the refusal is located at the case file that named it
        assert ("DP054" in results) == allowed and ("LY095" in results) != allowed


def test_sarif_reads_no_location_from_provenance_text(reports):
    report = copy.deepcopy(reports["board_nv12_deploy", True])
    for finding in report["findings"]:
        for fact in finding["evidence"].values():
            fact["source"] = "x;/etc/passwd.py line 1"
            fact.pop("locations", None)
    for step in report["trace"]:
        for fact in step["facts"]:
            fact["source"] = "/etc/passwd.py line 1"
            fact.pop("locations", None)
    text = render_sarif(report, audit=True)
    assert "passwd" not in text
    uris = {p["artifactLocation"]["uri"] for p in _places(json.loads(text))}
    assert uris == {"case.yaml"}                     # the checklist's default place only


# --- the verdict: whatever makes --fail-on exit 1 (the stage conclusion included) is a
# failing testcase and a SARIF result, with its evidence, places and fix

LEVELS = ("info", "warning", "error")
SARIF_RANK = {"note": 0, "warning": 1, "error": 2}


@pytest.mark.parametrize("level", LEVELS)
def test_ci_formats_fail_exactly_when_the_run_fails(reports, sarif_validator, level):
    """Over every bundled example, triage and audit: a JUnit failure and a SARIF result at
    or above the level whenever --fail-on gives exit 1; no JUnit failure otherwise."""
    for (name, audit), report in reports.items():
        failed = fails_on(report, level)
        suite = next(iter(JUnitXml.fromstring(render_junit(report, audit, fail_on=level))))
        assert (suite.failures > 0) == failed, (name, audit, level)
        assert suite.tests > 0
        log = json.loads(render_sarif(report, audit, fail_on=level))
        assert not list(sarif_validator.iter_errors(log)), name
        run = log["runs"][0]
        flagged = [r for r in run["results"] if SARIF_RANK[r["level"]] >= SEVERITY_RANK[level]]
        assert bool(flagged) or not failed, (name, audit, level)
        if level != "info":         # a higher level never leaves a result out
            plain = json.loads(render_sarif(report, audit))["runs"][0]["results"]
            assert run["results"] == plain, (name, audit, level)
        assert run["invocations"] == [{"executionSuccessful": True, "exitCode": int(failed)}]
        assert run["properties"]["failed"] is failed


def _case(tmp_path, example: str):
    with example_path(example) as source:
        shutil.copytree(source, tmp_path / "case")
    return tmp_path / "case"


def test_the_conclusion_that_fails_the_run_is_in_junit(tmp_path, capsys):
    """convert_j6e_no_retrain has no finding, pitfall or checklist: only its conclusion
    (convert, an error) fails the run; JUnit was empty (tests="0")."""
    case = _case(tmp_path, "convert_j6e_no_retrain")
    target = tmp_path / "report.xml"
    assert main(["triage", str(case), "--format", "junit", "-o", str(target), "--no-env",
                 "--lang", "en", "--fail-on", "error"]) == 1
    suite = next(iter(JUnitXml.fromfile(str(target))))
    assert (suite.tests, suite.failures) == (1, 1)
    [testcase] = list(suite)
    assert testcase.classname == "conclusion" and testcase.name == "Stage conclusion: convert"
    [failure] = testcase.result
    assert isinstance(failure, Failure)
    assert failure.message.startswith("qat.bc is normal and quantized.bc abnormal")
    lines = failure.text.splitlines()
    assert lines[1:4] == ["Most likely stage: convert (determined)",
                          "likely cause: convert fixed-pointing and requantize",
                          "read from: case.yaml:12, case.yaml:13"]
    assert lines[4].startswith("next step: Without retraining only level 0 works")


def test_the_conclusion_that_fails_the_run_is_an_error_in_sarif(tmp_path, sarif_validator,
                                                                 capsys):
    case = _case(tmp_path, "convert_j6e_no_retrain")
    target = tmp_path / "report.sarif"
    assert main(["triage", str(case), "--format", "sarif", "-o", str(target), "--no-env",
                 "--fail-on", "error"]) == 1
    log = json.loads(target.read_text(encoding="utf-8"))
    assert not list(sarif_validator.iter_errors(log))
    run = log["runs"][0]
    [result] = run["results"]
    assert (result["ruleId"], result["level"]) == ("conclusion/convert", "error")
    message = result["message"]["text"]              # in the case's language, Chinese
    assert "当前最可能阶段：convert（已确定）" in message and "下一步：" in message
    places = [(p["physicalLocation"]["artifactLocation"]["uri"],
               p["physicalLocation"]["region"]["startLine"]) for p in result["locations"]]
    assert places == [("case.yaml", 12), ("case.yaml", 13)]
    lines = case.joinpath("case.yaml").read_text(encoding="utf-8").splitlines()
    assert "quantized_bc" in lines[12] and "qat_bc" in lines[11]
    assert run["invocations"][0]["exitCode"] == 1


def test_a_warning_that_fails_the_run_is_a_junit_failure(tmp_path, capsys):
    """--fail-on warning: a warning pitfall that gives exit 1 is a failure, not a pass."""
    case = _case(tmp_path, "convert_j6p")
    target = tmp_path / "report.xml"
    assert main(["triage", str(case), "--format", "junit", "-o", str(target), "--no-env",
                 "--lang", "en", "--fail-on", "warning"]) == 1
    failing = [c.classname for c in next(iter(JUnitXml.fromfile(str(target)))) if c.result
               and isinstance(c.result[0], Failure)]
    assert "pitfalls" in failing


def test_pitfalls_are_named_in_words(reports):
    report = reports["export_qat_export_unknown", False]
    names = [c.name for c in next(iter(JUnitXml.fromstring(render_junit(report))))]
    assert "PF030: qat.export.pt skipped" in names
    rules = json.loads(render_sarif(report))["runs"][0]["tool"]["driver"]["rules"]
    assert {"id": "PF030", "shortDescription": {"text": "qat.export.pt skipped"}} in rules
    assert not any(p["id"] in " ".join(names) for p in report["pitfalls"])
