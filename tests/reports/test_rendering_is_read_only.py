"""Rendering never changes the report it is given: the same report is rendered again in
another format, compared, or saved as JSON afterwards, and must still fit its schema."""

from __future__ import annotations

import copy

import pytest

from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.schema import check_report
from qcdoctor.engine.reports.terminal import render_terminal


@pytest.mark.parametrize("name", ["convert_quant_analysis", "board_nv12_deploy"])
@pytest.mark.parametrize("audit", [False, True])
def test_every_format_leaves_the_report_as_it_was(name, audit):
    with example_path(name) as path:
        report = triage_path(path, use_env=False, lang="en", full_checklist=audit)
    before = copy.deepcopy(report)
    for fmt in ("md", "html", "json", "sarif", "junit"):
        render(report, fmt, audit=audit)
        assert report == before, fmt
    render_terminal(report, audit=audit, color=False, width=100)
    assert report == before, "terminal"
    check_report(report, "report.json")
