"""The audit's summary line adds up to the table under it: the checks counted once, plus
the mandatory items that only show a finer check's status, said as such."""

from __future__ import annotations

import pytest

from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.view import audit_view


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", example_names())
def test_the_summary_line_accounts_for_every_row(name, lang):
    with example_path(name) as path:
        report = triage_path(path, use_env=False, lang=lang, full_checklist=True)
    audit = audit_view(report)
    counts = audit["counts"]
    assert sum(counts.values()) == len(report["checklist"])
    line = audit["audit_summary"]
    assert str(counts["fail"]) in line and str(counts["pass"]) in line
    rolled = [c for c in report["checklist"] if c.get("parts")]
    assert counts["rolled_up"] == len(rolled)
    # the roll-up is named exactly when there is one
    assert (("mandatory item" in line or "必检项" in line) == bool(rolled))
