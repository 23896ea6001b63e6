"""qcdoctor.Report: typed, read-only parts built from the JSON report, every rendering,
saving (atomic, never over the case's own files), the notebook views, and a report read
back from its JSON."""

from __future__ import annotations

import dataclasses
import html
import json
import re

import pytest

import qcdoctor
from qcdoctor.engine.api.report import format_of
from qcdoctor.engine.commands.examples import copy_example


@pytest.fixture(scope="module")
def report():
    return qcdoctor.triage(example="convert_quant_analysis", lang="en")


def test_the_parts_are_the_json_reports(report):
    data = report.to_dict()
    assert report.conclusion.stage == data["conclusion"]["stage"] == "convert"
    assert report.conclusion.determined is True
    assert [e.rule for e in report.conclusion.evidence] == \
        [e["rule"] for e in data["conclusion"]["evidence"]]
    assert [(a.id, a.kind, a.code) for a in report.next_actions] == \
        [(a["id"], a["kind"], a.get("code")) for a in data["next_actions"]]
    assert [(f.rule, f.severity, f.title) for f in report.findings] == \
        [(f["rule"], f["severity"], f["title"]) for f in data["findings"]]
    assert report.findings[0].evidence["layer_origin"]["layer"] == \
        data["findings"][0]["evidence"]["layer_origin"]["layer"]
    assert [c.id for c in report.cautions] == [c["id"] for c in data["cautions"]]
    assert [(k.name, k.present, k.path) for k in report.keep] == \
        [(k["name"], k["present"], k["path"]) for k in data["artifacts"]["keep"]]
    assert report.consistency.applicable is False and report.consistency.rule == "CS010"
    assert (report.case_path, report.title, report.language) == (
        "example:convert_quant_analysis", data["case"]["title"], "en")


def test_a_checklist_item_has_its_parts():
    audit = qcdoctor.audit(example="board_nv12_deploy", lang="en")
    item = next(c for c in audit.checklist if c.id == "input_preprocessing")
    assert item.status == "fail" and item.mandatory
    assert any(p.id == "preprocess_mode" and p.status == "fail" for p in item.parts)
    unknown = next(c for c in audit.checklist if c.status == "unknown")
    assert unknown.provide


def test_the_report_is_read_only(report):
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.conclusion.stage = "compile"
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.language = "zh"
    with pytest.raises(TypeError):
        report.findings[0].evidence["layer_origin"]["layer"] = "x"
    copy = report.to_dict()
    copy["conclusion"]["stage"] = "compile"
    assert report.to_dict()["conclusion"]["stage"] == "convert"
    assert hash(report.conclusion) == hash(report.in_language("en").conclusion)


def test_rendering_changes_nothing_of_the_report(tmp_path):
    from tests.api.helpers import cli_json
    fresh = qcdoctor.triage(example="convert_quant_analysis", lang="en")
    fresh.to_text(width=80)
    for fmt in ("md", "html", "sarif", "junit"):       # the JSON made last, from what is left
        fresh.render(fmt, lang="zh")
        fresh.render(fmt)
    assert fresh.to_dict() == cli_json(tmp_path / "r.json", "triage", "--example",
                                       "convert_quant_analysis", "--lang", "en")
    assert fresh.in_language("zh").to_dict() == cli_json(
        tmp_path / "r.json", "triage", "--example", "convert_quant_analysis", "--lang", "zh")


def test_the_terminal_view(report):
    plain = report.to_text(width=80)
    assert "convert" in plain and "\x1b[" not in plain
    assert max(map(len, plain.splitlines())) <= 80
    assert "\x1b[" in report.to_text(width=80, color=True)


def test_saving_takes_the_format_from_the_name(report, tmp_path):
    for name, start in (("r.md", "# "), ("r.HTML", "<!DOCTYPE html>"), ("r.json", "{"),
                        ("r.sarif", "{"), ("r.xml", "<?xml")):
        written = report.save(tmp_path / name)
        assert written.read_text(encoding="utf-8").startswith(start)
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == report.to_dict()
    assert report.save(tmp_path / "zh.md", lang="zh").read_text(encoding="utf-8") == \
        report.to_markdown(lang="zh")
    assert report.save(tmp_path / "any.out", format="md").read_text(encoding="utf-8") == \
        report.to_markdown()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    with pytest.raises(qcdoctor.QcdoctorError, match="ending '.txt'") as caught:
        report.save(tmp_path / "r.txt")
    assert caught.value.file == str(tmp_path / "r.txt") and "format=" in caught.value.fix
    with pytest.raises(qcdoctor.QcdoctorError, match="did you mean 'html'"):
        report.save(tmp_path / "r.md", format="htm")
    with pytest.raises(qcdoctor.QcdoctorError, match="does not exist"):
        report.save(tmp_path / "no" / "r.md")
    assert format_of("REPORT.Markdown") == "md"


def test_a_report_is_never_saved_over_the_cases_files(tmp_path):
    case = copy_example("convert_quant_analysis", str(tmp_path / "c"))
    report = qcdoctor.triage(case)
    table = case / "qa_convert" / "compare_per_layer_out.txt"
    before = {p: p.read_bytes() for p in (case / "case.yaml", table)}
    for target in (case / "case.yaml", table, case):
        with pytest.raises(qcdoctor.QcdoctorError):
            report.save(target, format="md")
    assert {p: p.read_bytes() for p in before} == before
    built = qcdoctor.Case(chip="J6E", stages={"qat_bc": 0.4}, folder=case)
    with pytest.raises(qcdoctor.QcdoctorError, match="overwrite an input"):
        built.triage().save(case / "case.yaml", format="md")
    assert (case / "case.yaml").read_bytes() == before[case / "case.yaml"]


def test_a_bundle_is_not_saved_over(tmp_path):
    from qcdoctor.engine.commands.cli import main
    case = copy_example("board_only", str(tmp_path / "c"))
    assert main(["pack", str(case), "-o", str(tmp_path / "b.tar.gz")]) == 0
    before = (tmp_path / "b.tar.gz").read_bytes()
    with pytest.raises(qcdoctor.QcdoctorError, match="overwrite an input"):
        qcdoctor.triage(tmp_path / "b.tar.gz").save(tmp_path / "b.tar.gz", format="md")
    assert (tmp_path / "b.tar.gz").read_bytes() == before


def test_fails_judges_as_fail_on(report, tmp_path):
    from qcdoctor.engine.commands.cli import main
    seen = set()
    for name in ("convert_quant_analysis", "single_frame", "wide_gap", "board_nv12_deploy"):
        for audit in (False, True):
            made = (qcdoctor.audit if audit else qcdoctor.triage)(example=name)
            for level in ("info", "warning", "error", "never"):
                code = main(["audit" if audit else "triage", "--example", name, "--fail-on",
                             level, "-o", str(tmp_path / "r.md")])
                assert made.fails(level) == (code == 1), (name, audit, level)
                seen.add(code)
    assert seen == {0, 1}
    with pytest.raises(qcdoctor.QcdoctorError, match="did you mean 'error'"):
        report.fails("errors")


def test_in_jupyter_the_report_is_its_html_page_in_a_frame(report):
    shown = report._repr_html_()
    assert shown.startswith("<iframe ") and shown.endswith("</iframe>")
    page = html.unescape(re.search(r'srcdoc="([^"]*)"', shown).group(1))
    assert page == report.to_html()                 # the page itself, nothing left out
    assert report.conclusion.evidence[0].text in html.unescape(page)
    assert page.count("<svg") >= 2                  # the plots, inline
    # nothing is fetched: the only addresses are the SVG namespaces
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= {
        "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert "<link" not in page and "<script src" not in page
    assert report._repr_markdown_() == report.to_markdown()


def test_drawing_the_plots_leaves_matplotlib_as_it_was(tmp_path):
    """The page is the command line's (drawn with matplotlib's defaults and the plots'
    own settings, whatever the user set), and the user's settings, backend and open
    figures are as they were; whoever draws next gets the plots' settings again."""
    import subprocess
    import sys

    import matplotlib
    import matplotlib.pyplot as plt

    from qcdoctor.engine.reports.formats import render
    printed = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", "--example",
                              "convert_quant_analysis", "--lang", "en", "--format", "html"],
                             capture_output=True, text=True, check=True, timeout=300)
    backend = matplotlib.get_backend()
    figure = plt.figure()
    try:
        with matplotlib.rc_context({"font.size": 17.0, "svg.fonttype": "path",
                                    "lines.linewidth": 4.0}):
            ours = dict(matplotlib.rcParams)
            fresh = qcdoctor.triage(example="convert_quant_analysis", lang="en")
            assert fresh.to_html() == printed.stdout
            assert dict(matplotlib.rcParams) == ours
        assert plt.get_fignums() == [figure.number]
        assert render(fresh.to_dict(), "html") == printed.stdout
    finally:
        plt.close(figure)
    assert matplotlib.get_backend().lower() == backend.lower()   # (the renderer writes "Agg")


def test_a_report_read_from_its_json(report, tmp_path):
    again = qcdoctor.Report.from_dict(json.loads(report.to_json()))
    assert again == report and again.to_dict() == report.to_dict()
    assert again.to_markdown() == report.to_markdown()
    with pytest.raises(qcdoctor.QcdoctorError, match="in en only") as caught:
        again.in_language("zh")
    assert "lang='zh'" in caught.value.fix
    damaged = report.to_dict()
    damaged["conclusion"]["stage"] = "nowhere"
    with pytest.raises(qcdoctor.QcdoctorError) as caught:
        qcdoctor.Report.from_dict(damaged)
    assert caught.value.key == "conclusion.stage"
    with pytest.raises(qcdoctor.QcdoctorError, match="not a qcdoctor report"):
        qcdoctor.Report.from_dict({"schema": "something else"})


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(qcdoctor.QcdoctorError, match="either a case"):
        qcdoctor.triage()
    with pytest.raises(qcdoctor.QcdoctorError, match="either a case"):
        qcdoctor.triage(tmp_path, example="board_only")
    with pytest.raises(qcdoctor.QcdoctorError, match="did you mean 'board_only'") as caught:
        qcdoctor.audit(example="bord_only")
    assert caught.value.key == "example"
    with pytest.raises(qcdoctor.QcdoctorError, match="did you mean 'en'") as caught:
        qcdoctor.triage(example="board_only", lang="eng")
    assert caught.value.key == "lang"
    with pytest.raises(qcdoctor.CaseError, match="no case.yaml in this folder"):
        qcdoctor.triage(tmp_path)
    with pytest.raises(qcdoctor.QcdoctorError, match="no such bundle"):
        qcdoctor.triage(tmp_path / "gone.tar.gz")


def test_repr_says_what_the_report_concludes(report):
    assert repr(report) == ("<qcdoctor triage report of 'example:convert_quant_analysis': "
                            f"convert (determined), {len(report.next_actions)} next action(s), "
                            f"{len(report.findings)} finding(s), language en>")
