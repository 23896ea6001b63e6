"""One report rendered in any output format of triage and audit."""

from __future__ import annotations

REPORT_FORMATS = ("md", "html", "json")
EXTENSIONS = {"md": "md", "html": "html", "json": "json"}


def render_output(report: dict, fmt: str, audit: bool = False) -> str:
    from .report import render
    return render(report, fmt, audit=audit)
