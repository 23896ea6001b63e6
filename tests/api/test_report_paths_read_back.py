"""A report read back with ``Report.from_dict`` may carry any case path: one too long for
the system to look up, or holding a NUL byte, still renders and saves in every format (the
SARIF run then has no base URI; a real folder still gives one)."""

from __future__ import annotations

import json

import pytest

import qcdoctor
from qcdoctor.engine.api.report import Report
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.reports.sarif import CASE_ROOT

FORMATS = ("md", "html", "json", "sarif", "junit")


@pytest.fixture(scope="module")
def report_data() -> dict:
    with example_path("convert_j6e_no_retrain") as path:
        return qcdoctor.triage(path, lang="en").to_dict()


@pytest.mark.parametrize("path", ["/x/" + "a" * 5000, "/x/" + "/".join(["b" * 200] * 40),
                                  "case\x00folder", ""])
def test_any_case_path_renders_and_saves_in_every_format(tmp_path, report_data, path):
    report = Report.from_dict({**report_data, "case": {**report_data["case"], "path": path}})
    for fmt in FORMATS:
        assert report.render(fmt).strip(), fmt
    assert report.to_text().strip() and report._repr_html_().strip()
    sarif = json.loads(report.render("sarif"))
    assert "originalUriBaseIds" not in sarif["runs"][0]
    report.save(tmp_path / "out.sarif")
    assert json.loads((tmp_path / "out.sarif").read_text(encoding="utf-8"))["runs"]


def test_a_real_case_folder_is_the_base_uri(tmp_path, report_data):
    report = Report.from_dict({**report_data, "case": {**report_data["case"],
                                                       "path": str(tmp_path)}})
    base = json.loads(report.render("sarif"))["runs"][0]["originalUriBaseIds"]
    assert base[CASE_ROOT]["uri"] == tmp_path.resolve().as_uri() + "/"
