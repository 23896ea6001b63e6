"""qcdoctor diff: what changed between two reports of a case, and the verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import html5lib
import pytest

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path

QA_OLD = "quantized_bc: {metric: mAP, value: 0.512}"


def variant(tmp_path: Path, example: str, name: str, *edits: tuple[str, str, str]) -> Path:
    """A copy of a bundled example with (file, old text, new text) replacements."""
    with example_path(example) as source:
        shutil.copytree(source, tmp_path / name)
    for file, old, new in edits:
        path = tmp_path / name / file
        text = path.read_text(encoding="utf-8")
        assert old in text
        path.write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path / name


def diff_json(capsys, old: Path, new: Path, *extra: str) -> tuple[int, dict]:
    code = main(["diff", str(old), str(new), "--format", "json", "--no-env", "--lang", "en",
                 *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def quant(tmp_path) -> Path:
    return variant(tmp_path, "convert_quant_analysis", "before")


def test_fixed_variant(quant, tmp_path, capsys):
    fixed = variant(tmp_path, "convert_quant_analysis", "fixed",
                    ("case.yaml", QA_OLD, "quantized_bc: {metric: mAP, value: 0.572}"))
    code, diff = diff_json(capsys, quant, fixed, "--fail-on", "regression")
    assert code == 0 and diff["regressions"] == []
    assert diff["verdict"] == {"kind": "fixed", "stages": ["quantized_bc"]}
    assert diff["verdict_text"] == "fixed: quantized.bc back within tolerance"
    [stage] = diff["stages"]
    assert (stage["stage"], stage["old_status"], stage["new_status"]) == \
        ("quantized_bc", "abnormal", "normal")
    assert stage["delta"] == pytest.approx(0.06)
    assert diff["old"]["conclusion"]["stage"] == "convert"


def test_moved_variant_is_a_regression_only_when_asked(quant, tmp_path, capsys):
    moved = variant(tmp_path, "convert_quant_analysis", "moved",
                    ("case.yaml", QA_OLD, "quantized_bc: {metric: mAP, value: 0.572}\n"
                                          "  hbm_x86: {metric: mAP, value: 0.50}"))
    code, diff = diff_json(capsys, quant, moved)
    assert code == 0
    # what got worse on the way is said beside the move (and is what --fail-on acts on)
    assert diff["verdict_text"] == ("moved: the problem is now at compile; worse: hbm (x86) "
                                    "unknown → abnormal; newly reported: QuantAnalysis for a "
                                    "deployment problem")
    assert {"kind": "stage", "id": "hbm_x86", "old": "unknown", "new": "abnormal"} in \
        diff["regressions"]
    assert [p["id"] for p in diff["pitfalls"]["new"]] == ["quantanalysis_for_deploy"]
    assert main(["diff", str(quant), str(moved), "--no-env", "--fail-on", "regression"]) == 1


def test_unchanged_against_its_own_json_report(quant, tmp_path, capsys):
    report = tmp_path / "report.json"
    assert main(["triage", str(quant), "--format", "json", "-o", str(report), "--no-env",
                 "--lang", "en"]) == 0
    code, diff = diff_json(capsys, report, quant)
    assert code == 0 and diff["verdict"] == {"kind": "unchanged"}
    assert diff["stages"] == diff["layers"] == diff["checklist"] == []
    assert main(["diff", str(report), str(quant), "--no-env", "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert "**Verdict: unchanged**" in text and "## Stage results" not in text


def test_layer_changes_when_the_quant_analysis_changes(quant, tmp_path, capsys):
    after = variant(tmp_path, "convert_quant_analysis", "after")
    shutil.rmtree(after / "qa_convert")
    (after / "case.yaml").write_text(
        (after / "case.yaml").read_text(encoding="utf-8").replace("sensitivity: true",
                                                                   "sensitivity: false"),
        encoding="utf-8")
    code, diff = diff_json(capsys, quant, after)
    kinds = {(change["kind"], change["new"] is None) for change in diff["layers"]}
    assert ("layer_origin", True) in kinds and ("error_kind", True) in kinds
    origin = next(c for c in diff["layers"] if c["kind"] == "layer_origin")
    assert origin["old"]["layer"] == "head.reciprocal" and origin["analysis"] == "qa_convert"
    sensitivity = next(c for c in diff["layers"] if c["kind"] == "sensitivity_summary")
    assert sensitivity["old"]["top_ops"].startswith("head.reciprocal")


def test_checklist_fixed_and_broken(tmp_path, capsys):
    before = variant(tmp_path, "board_nv12_deploy", "before")
    after = variant(tmp_path, "board_nv12_deploy", "after",
                    ("deploy/compile_model.py", "yuvbt601full2bgr", "yuvbt601full2rgb"))
    code, diff = diff_json(capsys, before, after, "--fail-on", "regression")
    changes = {c["item"]: (c["old"], c["new"]) for c in diff["checklist"]}
    assert changes["preprocess_mode"] == ("fail", "pass")
    # the hbm stays abnormal: with the checklist passing, the conclusion moves to compile
    assert diff["verdict"] == {"kind": "moved", "stage": "compile", "items": []} and code == 0
    code, back = diff_json(capsys, after, before, "--fail-on", "regression")
    assert code == 1
    assert {"kind": "checklist", "id": "preprocess_mode", "old": "pass", "new": "fail"} in \
        back["regressions"]
    assert back["verdict_text"].startswith("moved: the problem is now at user-side adaptation; "
                                           "worse: Input pre-processing")


def test_html_and_chinese(quant, tmp_path, capsys):
    fixed = variant(tmp_path, "convert_quant_analysis", "fixed",
                    ("case.yaml", QA_OLD, "quantized_bc: {metric: mAP, value: 0.572}"))
    assert main(["diff", str(quant), str(fixed), "--format", "html", "--no-env"]) == 0
    tree = html5lib.parse(capsys.readouterr().out, namespaceHTMLElements=False)
    assert tree.find("head").find("title").text == "修复前后对比"
    strong = "".join(tree.find("body").find("p").find("strong").itertext())
    assert strong == "结论：已修复：quantized.bc 回到容差内"


@pytest.mark.parametrize("content, message", [
    (None, "no such file or folder"),
    ("{not json", "not a readable JSON report"),
    ('{"schema": "other"}', "not a qcdoctor report (schema qcdoctor/report-v1 expected)"),
    ('{"schema": "qcdoctor/report-v1"}', "the report lacks case, language, conclusion"),
])
def test_bad_side_is_one_clear_error(quant, tmp_path, content, message, capsys):
    side = tmp_path / "old.json"
    if content is not None:
        side.write_text(content, encoding="utf-8")
    assert main(["diff", str(side), str(quant), "--no-env"]) == 2
    err = capsys.readouterr().err
    assert f"{side}: {message}" in err and "fix:" in err


def test_diff_output_never_overwrites_a_side(quant, tmp_path, capsys):
    report = tmp_path / "report.json"
    main(["triage", str(quant), "--format", "json", "-o", str(report), "--no-env"])
    before = report.read_text(encoding="utf-8")
    assert main(["diff", str(report), str(quant), "-o", str(report), "--no-env"]) == 2
    assert "refusing to overwrite an input" in capsys.readouterr().err
    assert report.read_text(encoding="utf-8") == before


def _diff(old_stage="convert", new_stage="convert", **changes) -> dict:
    side = {"case": "c", "abnormal": ["quantized_bc"]}
    diff = {"old": {**side, "conclusion": {"stage": old_stage, "determined": True, "suspect": ""}},
            "new": {**side, "conclusion": {"stage": new_stage, "determined": True, "suspect": ""}},
            "stages": [], "layers": [], "checklist": [], "consistency": None,
            "pitfalls": {"gone": [], "new": []}, "missing": {"gone": [], "new": []},
            "regressions": []}
    diff.update(changes)
    return diff


def test_verdict_worse_better_changed():
    from qcdoctor.engine.diagnosis.report_changes import verdict
    from qcdoctor.engine.reports.changes import verdict_text
    worse = _diff(checklist=[{"item": "layout", "old": "pass", "new": "fail"}],
                  regressions=[{"kind": "checklist", "id": "layout", "old": "pass", "new": "fail"}])
    worse["verdict"] = verdict(worse)
    assert verdict_text(worse, "en") == "worse: Layout (NCHW/NHWC conversion) pass → FAIL"
    better = _diff(pitfalls={"gone": [{"id": "no_sensitivity", "text": "t"}], "new": []})
    better["verdict"] = verdict(better)
    assert verdict_text(better, "en") == "better: fewer problems reported"
    changed = _diff(stages=[{"stage": "qat", "old_status": "normal", "new_status": "normal",
                             "old_value": 0.5, "new_value": 0.51, "delta": 0.01, "metric": ""}])
    changed["verdict"] = verdict(changed)
    assert verdict_text(changed, "zh") == "有变化，无明显好坏"
    none = _diff(new_stage="none")
    none["verdict"] = verdict(none)
    assert verdict_text(none, "en") == "fixed: no consistency problem remains"
