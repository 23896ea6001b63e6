"""One report rendered in any output format of triage and audit (the CI formats included)."""

from __future__ import annotations

import json

from qcdoctor.safe_text import json_text

FORMATS = ("md", "html", "json")
EXTENSIONS = {"md": "md", "html": "html", "json": "json", "sarif": "sarif", "junit": "xml"}


def render_json(report: dict) -> str:
    """The Diagnosis as JSON: every string as it is, controls (by json) and bidi controls
    (by ``json_text``) written as escapes."""
    return json_text(json.dumps(report, ensure_ascii=False, indent=2)) + "\n"


def render(report: dict, fmt: str, audit: bool = False) -> str:
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        from qcdoctor.engine.reports.html import render_html  # matplotlib loads only for HTML
        return render_html(report, audit=audit)
    from qcdoctor.engine.reports.markdown import render_audit_markdown, render_markdown
    if audit:
        return render_audit_markdown(report)
    return render_markdown(report)


def render_output(report: dict, fmt: str, audit: bool = False,
                  fail_on: str | None = None) -> str:
    """``fail_on``: the run's --fail-on level, which the CI formats (sarif, junit) flag."""
    if fmt == "sarif":
        from qcdoctor.engine.reports.sarif import render_sarif
        return render_sarif(report, audit=audit, fail_on=fail_on)
    if fmt == "junit":
        from qcdoctor.engine.reports.junit import render_junit
        return render_junit(report, audit=audit, fail_on=fail_on)
    return render(report, fmt, audit=audit)
