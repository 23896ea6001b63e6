"""One report rendered in any output format of triage and audit (the CI formats included)."""

from __future__ import annotations

EXTENSIONS = {"md": "md", "html": "html", "json": "json", "sarif": "sarif", "junit": "xml"}


def render_output(report: dict, fmt: str, audit: bool = False) -> str:
    if fmt == "sarif":
        from .sarif import render_sarif
        return render_sarif(report, audit=audit)
    if fmt == "junit":
        from .junit import render_junit
        return render_junit(report, audit=audit)
    from .report import render
    return render(report, fmt, audit=audit)
