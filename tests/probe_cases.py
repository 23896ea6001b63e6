"""A probe's folder triaged as a user's case: case.yaml written beside it, the report
built in both languages and rendered in every format on the way (md, html, json, sarif,
junit, the terminal), the English one returned with its facts by type."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render_output
from qcdoctor.engine.reports.terminal import render_terminal


def triaged_case(case: Path, symptom: str) -> tuple[dict, dict]:
    (case / "case.yaml").write_text(f"symptom: {symptom}\nplatform: {{chip: J6E}}\n",
                                    encoding="utf-8")
    report = None
    for lang in ("zh", "en"):
        report = triage_path(case, use_env=False, lang=lang)
        for fmt in ("md", "html", "json", "sarif", "junit"):
            assert render_output(report, fmt).strip(), (fmt, lang)
        assert render_terminal(report, color=False).strip()
    facts: dict = {}
    for fact in report["facts"]:
        facts.setdefault(fact["type"], []).append(fact)
    return report, facts
