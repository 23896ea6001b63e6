"""The Python API gives what the command line gives for the same case: the same JSON
report (bundled examples, a case folder, a case.yaml, a support bundle; both languages,
also when the other language is asked of a report already made), the same renderings,
and the same audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import qcdoctor
from qcdoctor.engine.commands.examples import copy_example
from tests.api.helpers import cli_json, cli_output

# a spread of conclusions: convert, user_side with a failed checklist, export, compile,
# undetermined, and a case with QuantAnalysis tables (series, thresholds)
EXAMPLES = ("convert_j6e_no_retrain", "board_nv12_deploy", "export_qat_export_unknown",
            "compile_x86_and_board_abnormal", "wide_gap", "convert_quant_analysis")


@pytest.fixture(scope="module")
def folder_case(tmp_path_factory):
    """A copy of an example with QuantAnalysis outputs, and a support bundle of it."""
    root = tmp_path_factory.mktemp("cases")
    case = copy_example("convert_quant_analysis", str(root / "qa_case"))
    bundle = root / "qa_case.tar.gz"
    assert qcdoctor.triage(case) is not None
    from qcdoctor.engine.commands.cli import main
    assert main(["pack", str(case), "-o", str(bundle)]) == 0
    return case, bundle


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_gives_the_clis_json(name, lang, tmp_path):
    report = qcdoctor.triage(example=name, lang=lang)
    expected = cli_json(tmp_path / "r.json", "triage", "--example", name, "--lang", lang)
    assert report.to_dict() == expected
    assert report.language == lang and report.case_path == f"example:{name}"
    assert report.conclusion.stage == expected["conclusion"]["stage"]


@pytest.mark.parametrize("name", EXAMPLES[:3])
def test_the_other_language_of_a_report_is_the_clis_report_in_it(name, tmp_path):
    report = qcdoctor.triage(example=name, lang="zh")
    english = report.in_language("en")
    assert english.to_dict() == cli_json(tmp_path / "r.json", "triage", "--example", name,
                                         "--lang", "en")
    assert english.in_language("zh") is report        # made once, from the same facts
    assert report.to_markdown(lang="en") == english.to_markdown()


@pytest.mark.parametrize("given", ["folder", "./folder/", "case.yaml", "bundle", "./bundle"])
def test_a_folder_a_case_file_and_a_bundle_give_the_clis_json(given, folder_case, tmp_path,
                                                              monkeypatch):
    case, bundle = folder_case
    monkeypatch.chdir(case.parent)          # relative paths, named in the report as given
    path = {"folder": case.name, "./folder/": f"./{case.name}/",
            "case.yaml": f"{case.name}/case.yaml", "bundle": bundle.name,
            "./bundle": f"./{bundle.name}"}[given]
    for lang, other in (("zh", "en"), ("en", "zh")):
        report = qcdoctor.triage(path, lang=lang)
        assert report.to_dict() == cli_json(tmp_path / "r.json", "triage", path, "--lang", lang)
        # a bundle's folder is gone by now: its other language was made while it was open
        assert report.in_language(other).to_dict() == cli_json(
            tmp_path / "r.json", "triage", path, "--lang", other)
    assert report.case_path == (path if "bundle" in given else case.name)


def test_the_installed_command_prints_the_same_json(folder_case):
    case, _ = folder_case
    printed = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", str(case),
                              "--format", "json", "--lang", "en"], capture_output=True,
                             text=True, check=True, timeout=300, cwd=os.getcwd())
    assert qcdoctor.triage(case, lang="en").to_dict() == json.loads(printed.stdout)


@pytest.mark.parametrize("fmt", ["md", "html", "sarif", "junit"])
def test_every_rendering_is_the_clis(fmt, tmp_path):
    report = qcdoctor.triage(example="convert_quant_analysis", lang="en")
    expected = cli_output(tmp_path / "r.out", "triage", "--example", "convert_quant_analysis",
                          "--lang", "en", "--format", fmt)
    assert report.render(fmt) == expected
    assert report.save(tmp_path / "saved.out", format=fmt).read_text(encoding="utf-8") == expected


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_an_audit_is_the_clis_audit(lang, tmp_path):
    name = "board_nv12_deploy"
    report = qcdoctor.audit(example=name, lang=lang)
    assert report.audit and report.to_dict() == cli_json(
        tmp_path / "a.json", "audit", "--example", name, "--lang", lang)
    assert report.to_markdown() == cli_output(tmp_path / "a.md", "audit", "--example", name,
                                              "--lang", lang, "--format", "md")
    # the audit judges every checklist item; a triage of a case that is no deployment
    # problem lists none
    assert len(report.checklist) == len(report.to_dict()["checklist"]) > 10
    assert not qcdoctor.triage(example="convert_j6e_no_retrain").checklist
    assert qcdoctor.audit(example="convert_j6e_no_retrain").checklist


def test_the_options_reach_the_reading(folder_case, tmp_path):
    """use_env, allow_outside and trust_pickles are the CLI's --no-env, --allow-outside
    and --trust-pickles."""
    case, _ = folder_case
    outside = tmp_path / "elsewhere"
    copy_example("convert_quant_analysis", str(outside))
    moved = tmp_path / "moved"
    moved.mkdir()
    text = (case / "case.yaml").read_text(encoding="utf-8")
    (moved / "case.yaml").write_text(text.replace("out_dir: qa_convert",
                                                  f"out_dir: {outside / 'qa_convert'}"),
                                     encoding="utf-8")
    for extra, options in (([], {}), (["--allow-outside", str(outside)],
                                      {"allow_outside": [outside]}),
                           (["--no-env", "--trust-pickles"],
                            {"use_env": False, "trust_pickles": True})):
        assert qcdoctor.triage(moved, lang="en", **options).to_dict() == cli_json(
            tmp_path / "r.json", "triage", str(moved), "--lang", "en", *extra)
    refused = qcdoctor.triage(moved, lang="en")
    allowed = qcdoctor.triage(moved, lang="en", allow_outside=[outside])
    assert refused.to_dict() != allowed.to_dict()
    # one folder alone is a folder, not the characters of its name
    assert qcdoctor.triage(moved, lang="en", allow_outside=str(outside)) == allowed
