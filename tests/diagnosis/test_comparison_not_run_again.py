"""knowledge.md R5.7 at every stage with a QuantAnalysis comparison: where the case holds
the located comparison's per-layer tables, its next action is that comparison's
sensitivity, on the same bad case into a folder of its own, never the comparison again
(which would overwrite the user's results). Read in both languages, the report says one
thing (R3.14) and renders in every format; the action's code runs the sensitivity and
no per-layer comparison, and leaves the first folder as it is."""

from __future__ import annotations

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render_output
from qcdoctor.engine.reports.terminal import render_terminal
from tests.diagnosis.one_voice import problems
from tests.diagnosis.test_knowledge_coverage import MAP, build_case

ROWS = {"s18.calibration_comparison_not_run_again": ("AN046", "qa_fake_quant", "qa_fake_quant_sens"),
        "s18.pre_export_comparison_not_run_again": ("AN048", "qa_pre_export", "qa_pre_export_sens"),
        "s18.export_comparison_not_run_again": ("AN049", "qa_export", "qa_export_sens")}


def _example(row_id: str, kind: str) -> dict:
    row = next(r for r in MAP["rows"] if r["id"] == row_id)
    return row["sources"]["profiler"][kind]


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("row_id", list(ROWS))
def test_the_comparison_in_the_case_is_followed_by_its_sensitivity(tmp_path, row_id, lang):
    rule, first, sens = ROWS[row_id]
    folder = build_case(tmp_path / "case", _example(row_id, "fires"))
    report = triage_case(load_case(folder), lang=lang, environ={}, installed={}, cwd=folder)
    actions = {a["id"]: a for a in report["next_actions"]}
    assert first not in actions                         # not the same comparison again
    pending = actions[f"{sens}:{first}"]
    assert (pending["rule"], pending["cost"]) == (rule, "analyse")
    code = pending["code"]
    assert "qa_sens.sensitivity()" in code and "compare_per_layer" not in code
    assert f'out_dir="./{first}_sens"' in code          # a folder of its own
    assert f'compared_in = "./{first}"' in code         # the first one left as it is
    compile(code, rule, "exec")
    assert not problems(report), problems(report)
    for fmt in ("md", "html", "json", "sarif", "junit"):
        assert render_output(report, fmt).strip(), fmt
    assert render_terminal(report, color=False).strip()


@pytest.mark.parametrize("row_id", list(ROWS))
def test_with_its_sensitivity_in_the_case_neither_run_is_proposed(tmp_path, row_id):
    rule, first, sens = ROWS[row_id]
    folder = build_case(tmp_path / "case", _example(row_id, "quiet"))
    report = triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)
    ids = {a["id"] for a in report["next_actions"]}
    assert not {first, f"{sens}:{first}"} & ids
    assert rule not in {a["rule"] for a in report["next_actions"]}
