"""Bundled examples: what each must conclude, and their full reports against golden files.

Regenerate the golden files after an intended change with
``QCDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/reports/test_golden_reports.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from tests.paths import TESTS

GOLDEN = TESTS / "golden"
UPDATE = os.environ.get("QCDOCTOR_UPDATE_GOLDEN") == "1"

# example -> (stage, rules that must be in the conclusion's evidence, must-have pitfalls
# and cautions: ids prefixed "caution:" are mistakes the case only comes close to)
EXPECTED = {
    "export_qat_export_unknown": ("export", {"ST041"}, {"skipped_qat_export"}),
    "pre_export_lut": ("pre_export", {"ST030"}, {"strategy_for_lut"}),
    "convert_j6e_no_retrain": ("convert", {"ST050"}, set()),
    "convert_j6p": ("convert", {"ST050"}, {"no_sensitivity"}),
    "convert_j6m_level1_tried": ("convert", {"ST050"}, set()),
    "compile_x86_and_board_abnormal": ("compile", {"ST080", "ST081"}, {"quantanalysis_for_deploy"}),
    "board_only": ("user_side", {"ST090"}, set()),
    "single_frame": ("undetermined", {"ST140"}, {"single_frame_evidence"}),
    "wide_gap": ("undetermined", {"ST100"}, {"caution:unverified_quantized_bc"}),
    "convert_quant_analysis": ("convert", {"ST050"}, {"caution:worst_layer_as_root"}),
    "board_nv12_deploy": ("user_side", {"ST150", "ST081"}, set()),
}


def _report(name: str, lang: str) -> dict:
    with example_path(name) as path:
        return triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path,
                           display_path=f"example:{name}")


def test_every_example_has_expectations():
    assert set(example_names()) == set(EXPECTED)
    assert len(EXPECTED) >= 8


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_conclusions(name):
    stage, rules, pitfalls = EXPECTED[name]
    report = _report(name, "en")
    assert report["conclusion"]["stage"] == stage
    assert rules <= {e["rule"] for e in report["conclusion"]["evidence"]}
    listed = ({p["id"] for p in report["pitfalls"]}
              | {f"caution:{c['id']}" for c in report["cautions"]})
    assert pitfalls <= listed
    assert report["next_actions"], "every example gets a next step"


def test_specific_example_advice():
    j6e = _report("convert_j6e_no_retrain", "en")
    assert (j6e["consistency"]["level"], j6e["consistency"]["requires_retrain"]) == (0, False)
    j6m = _report("convert_j6m_level1_tried", "en")
    assert j6m["consistency"]["level"] == 2
    j6p = _report("convert_j6p", "en")
    assert j6p["consistency"]["applicable"] is False
    qa = next(a for a in j6p["next_actions"] if a["kind"] == "quant_analysis")["code"]
    assert "run(run_baseline_model=False, run_analysis_model=True)" in qa
    export = _report("export_qat_export_unknown", "en")
    assert export["next_actions"][0]["stage_to_evaluate"] == "qat_export"
    wide = _report("wide_gap", "en")
    assert wide["next_actions"][0]["stage_to_evaluate"] == "quantized_bc"
    qa = _report("convert_quant_analysis", "en")
    # a convert case: the sensitive LUT op points at its conversion, not at LUT bisection
    assert {"LY010", "LY030", "LY045", "LY054"} <= {f["rule"] for f in qa["findings"]}
    # the analysis located the op: its remedy first, bc_editor confirms after it (R3.6)
    assert [a["id"] for a in qa["next_actions"]] == ["fixed_scale:head.reciprocal", "bc_editor"]
    assert not any(a["id"] == "qa_convert" for a in qa["next_actions"])    # already run
    deploy = _report("board_nv12_deploy", "en")
    failed = [c["id"] for c in deploy["checklist"] if c["status"] == "fail"]
    # the wrong mode fails its check and, rolled up, input pre-processing (knowledge §10)
    assert failed == ["input_preprocessing", "preprocess_mode"] and len(deploy["checklist"]) == 14
    board = _report("board_only", "en")
    platform = next(f for f in board["facts"] if f["type"] == "platform")
    assert platform["march"] == "nash-m" and ".env.board" in platform["source"]


def _check(path: Path, text: str) -> None:
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden file {path.name} was missing and has been written; re-run")
    assert text == path.read_text(encoding="utf-8"), f"{path.name} differs from the report"


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_golden_markdown(name, lang):
    _check(GOLDEN / f"{name}.{lang}.md", render(_report(name, lang), "md"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_json(name):
    text = render(_report(name, "en"), "json")
    json.loads(text)
    _check(GOLDEN / f"{name}.en.json", text)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_report_contract(name):
    report = json.loads(render(_report(name, "zh"), "json"))
    for key in ("schema", "tool", "case", "language", "conclusion", "missing", "next_actions",
                "consistency", "findings", "checklist", "pitfalls", "artifacts", "facts", "trace"):
        assert key in report
    assert report["schema"] == "qcdoctor/report-v1"
    assert set(report["conclusion"]) >= {"stage", "suspect", "determined", "evidence"}
    for action in report["next_actions"]:
        assert {"id", "kind", "text"} <= set(action)
    for item in report["missing"]:
        assert {"id", "question", "why"} <= set(item)
    for keep in report["artifacts"]["keep"]:
        assert {"name", "present", "path"} <= set(keep)
    for t in report["trace"]:
        assert {"rule", "facts", "produced"} <= set(t)


# the HTML report's golden files hold its structure: each inline SVG is reduced to the
# texts it shows (title, axis labels, legend, ticks), its drawing left out, and the page's
# style sheet and script (the same in every report) are left out too
HTML_GOLDEN = [("convert_quant_analysis", False), ("board_nv12_deploy", True)]


def html_structure(page: str) -> str:
    def texts(svg):
        shown = re.findall(r"<text\b[^>]*>(.*?)</text>", svg.group(0), flags=re.S)
        return "<svg>\n" + "".join(f"  <text>{t}</text>\n" for t in shown) + "</svg>"
    page = re.sub(r"(?s)<(style|script)>.*?</\1>", r"<\1>…</\1>", page)
    return re.sub(r"(?s)<svg\b.*?</svg>", texts, page)


@pytest.mark.parametrize("name,audit", HTML_GOLDEN)
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_golden_html(name, audit, lang):
    with example_path(name) as path:
        report = triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path,
                             display_path=f"example:{name}", full_checklist=audit)
    page = render(report, "html", audit=audit)
    if lang == "en":
        assert page == render(report, "html", audit=audit)    # byte-stable, SVG included
    suffix = ".audit" if audit else ""
    _check(GOLDEN / "html" / f"{name}{suffix}.{lang}.html", html_structure(page))
