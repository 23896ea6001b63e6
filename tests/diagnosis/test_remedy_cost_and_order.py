"""What a remedy costs at its stage and which step comes first (knowledge.md §17 R4.6, R4.7,
R4.10), each case a real case folder triaged in full in both languages:

- calibration before QAT: a qconfig change is calibrated again, in minutes, never trained;
- a remedy that needs QAT waits for the cheaper step that confirms it on the same
  comparison (its sensitivity run, a fix trial, level 0 without retraining);
- at export with the fake-quant state unknown, the step-0 state check is an action;
- at the board with x86 not run, the x86 run comes before collecting checklist items, and
  a failed item before both.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.wording import labels
from tests.deploy.scripts import CORRECT
from tests.diagnosis.test_deployment_failures_in_conclusion import deploy_case
from tests.qa.scenarios import build, sens_rows, truncation_rows
from tests.qa.writers import write_compare, write_sensitivity

LANGS = ("en", "zh")
# the calibration run of the float vs calib comparison: compare_per_layer, no sensitivity
CALIB_RUN = {"type": "fake_quant", "baseline": "float", "analysis": "calib", "out_dir": "qa_calib",
             "sensitivity": False}
BEFORE_QAT = {"float": {"metric": "mAP", "value": 0.452}, "calib": {"metric": "mAP", "value": 0.401}}
# the same drop at calibration, with a QAT model trained already (and short of float too)
QAT_TRAINED = {**BEFORE_QAT, "qat": {"metric": "mAP", "value": 0.405}}
J6E = {"platform": {"chip": "J6E"},
       "versions": {"hbdk4-compiler": "4.4.2", "horizon-plugin-pytorch": "3.1.5"}}
N, A = {"status": "normal"}, {"status": "abnormal"}


def triage(folder: Path, lang: str) -> dict:
    return triage_case(load_case(folder), lang=lang, environ={}, installed={}, cwd=folder)


def cost_label(lang: str, cost: str) -> str:
    return labels()[lang]["cost_label"][cost]


def rules(report: dict) -> list[str]:
    return [a["rule"] for a in report["next_actions"]]


def action(report: dict, rule: str) -> dict:
    return next(a for a in report["next_actions"] if a["rule"] == rule)


def calls(code: str) -> set[str]:
    """The names of the functions and methods the generated code calls (parsed, not run)."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def calibration_case(root: Path, stages: dict, **extra) -> Path:
    """Float normal, calib abnormal; a float vs calib folder whose reading finds
    `head.reciprocal` truncated (qint8 at qscale 0.05 holds 6.35, the baseline reaches 130)."""
    folder = root / "calib"
    write_compare(folder / "qa_calib", truncation_rows())
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
            "retrain": "yes", "stages": stages, "analyses_run": [CALIB_RUN], **extra}
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def convert_case(root: Path, **changes) -> Path:
    """The truncation scenario at convert (qa_convert, sensitivity run), case keys changed."""
    folder = build("truncation", root)
    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    (folder / "case.yaml").write_text(yaml.safe_dump({**data, **changes}), encoding="utf-8")
    return folder


# --- R4.6: at calibration, before QAT, a qconfig change is calibrated again ----------------

@pytest.mark.parametrize("lang", LANGS)
def test_before_qat_the_fixed_scale_is_calibrated_again_first(tmp_path, lang):
    report = triage(calibration_case(tmp_path, BEFORE_QAT), lang)
    assert report["conclusion"]["stage"] == "calibration"
    first, second = report["next_actions"][:2]
    assert (first["id"], first["rule"], first["cost"]) == \
        ("fixed_scale:head.reciprocal", "LY030", "recalibrate")
    assert first["text"].startswith(cost_label(lang, "recalibrate"))
    assert cost_label(lang, "retrain") not in first["text"]
    # its code prepares with the fixed scale and calibrates again; no QAT anywhere
    code = first["code"]
    assert "train_qat" not in code
    assert {"prepare", "set_fake_quantize", "evaluate"} <= calls(code)
    assert "FakeQuantState.CALIBRATION" in code and "FakeQuantState.VALIDATION" in code
    assert code.index("calib_model = prepare(") < code.index("FakeQuantState.CALIBRATION") \
        < code.index("evaluate(calib_model)")
    assert '"head.reciprocal": {"threshold": threshold}' in code and "threshold = 130" in code
    # the sensitivity run of the same comparison follows: it is cheaper than nothing here;
    # the comparison itself is in the case and is not run again (R5.7)
    assert (second["rule"], second["cost"]) == ("AN046", "analyse")
    assert "sensitivity()" in second["code"] and "compare_per_layer" not in second["code"]
    assert "AN010" not in rules(report)


@pytest.mark.parametrize("lang", LANGS)
def test_before_qat_a_user_who_cannot_retrain_still_gets_the_recalibration_first(tmp_path, lang):
    report = triage(calibration_case(tmp_path, BEFORE_QAT, retrain="no"), lang)
    first = report["next_actions"][0]
    assert (first["rule"], first["cost"]) == ("LY030", "recalibrate")
    assert cost_label(lang, "cannot_retrain") not in first["text"]


# --- R4.7: a remedy that needs QAT waits for a pending cheaper confirmation ------------------

@pytest.mark.parametrize("lang", LANGS)
def test_a_qat_remedy_waits_for_the_fix_trial_and_the_sensitivity_run(tmp_path, lang):
    report = triage(calibration_case(tmp_path, QAT_TRAINED), lang)
    order = rules(report)
    # the probe can measure the fix (both sides are torch models) and the sensitivity of
    # float vs calib was not run: both come before days of QAT
    assert order[:3] == ["FX032", "AN046", "LY030"], order
    # the same reading with a trained QAT model: the fixed scale needs QAT again
    assert report["conclusion"]["stage"] == "calibration"
    fixed = action(report, "LY030")
    assert fixed["cost"] == "retrain" and fixed["text"].startswith(cost_label(lang, "retrain"))
    assert "train_qat" in calls(fixed["code"]) and "CALIBRATION" not in fixed["code"]
    trial = report["next_actions"][0]
    assert (trial["id"], trial["cost"]) == ("probe_fix_trials:qa_calib", "analyse")
    assert "compare_models" in calls(trial["code"]) and "try_fixes=True" in trial["code"]
    assert 'stages=("float", "calib")' in trial["code"]
    assert "`qcdoctor probe --try-fixes`" in trial["text"]
    compile(trial["code"], "probe_fix_trials", "exec")


@pytest.mark.parametrize("lang", LANGS)
def test_with_its_sensitivity_run_the_qat_remedy_still_waits_for_the_fix_trial(tmp_path, lang):
    folder = calibration_case(tmp_path, QAT_TRAINED,
                              analyses_run=[{**CALIB_RUN, "sensitivity": True}])
    write_sensitivity(folder / "qa_calib", sens_rows([("head.reciprocal", 0.8), ("pre.1", 0.01),
                                                      ("pre.2", 0.005), ("pre.3", 0.0)]))
    order = rules(triage(folder, lang))
    assert not {"AN010", "AN046"} & set(order)   # the comparison's sensitivity is run
    assert order.index("FX032") < order.index("LY030"), order


@pytest.mark.parametrize("lang", LANGS)
def test_at_convert_the_remedy_waits_for_the_sensitivity_run_of_its_comparison(tmp_path, lang):
    run = {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
           "out_dir": "qa_convert", "sensitivity": False}
    folder = tmp_path / "convert"
    write_compare(folder / "qa_convert", truncation_rows())
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
            "retrain": "yes", "platform": {"chip": "J6P"}, "analyses_run": [run],
            "stages": {"qat_bc": {"metric": "mAP", "value": 0.5},
                       "quantized_bc": {"metric": "mAP", "value": 0.4}}}
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    report = triage(folder, lang)
    order = rules(report)
    # R5.7: the comparison is in the case; its pending sensitivity step is AN045
    assert "AN040" not in order and order.index("AN045") < order.index("LY030"), order
    # right after the step it waits for, and bc_editor still confirms after the remedy (R3.6)
    assert order.index("LY030") == order.index("AN045") + 1
    assert order.index("AN042") > order.index("LY030")
    assert action(report, "LY030")["text"].startswith(cost_label(lang, "retrain"))


@pytest.mark.parametrize("lang", LANGS)
def test_at_convert_the_remedy_waits_for_level_0_when_retraining_is_not_known(tmp_path, lang):
    report = triage(convert_case(tmp_path / "unknown", retrain="unknown", **J6E), lang)
    order = rules(report)
    assert "CS025" in order and order.index("CS025") < order.index("LY030"), order
    level0 = action(report, "CS025")
    assert level0["cost"] == "analyse" and "train_qat" not in level0["code"]
    # retraining allowed: level 0 is no longer proposed, nothing cheaper confirms the
    # remedy on its comparison (its sensitivity is run), so the located op's remedy leads
    report = triage(convert_case(tmp_path / "yes", retrain="yes", **J6E), lang)
    first = report["next_actions"][0]
    assert (first["rule"], first["cost"]) == ("LY030", "retrain")
    assert first["text"].startswith(cost_label(lang, "retrain"))


# --- R4.10: the step-0 state check at export, the x86 split at the board ----------------------

@pytest.mark.parametrize("lang", LANGS)
def test_the_bundled_export_case_gets_the_step_0_state_check(lang):
    with example_path("export_qat_export_unknown") as folder:
        report = triage(folder, lang)
    assert report["conclusion"]["stage"] == "export"
    order = [a["id"] for a in report["next_actions"]]
    assert order[:2] == ["evaluate_qat_export", "export_state_check"], order
    check = report["next_actions"][1]
    assert (check["rule"], check["cost"]) == ("AN034", "verify")
    code = check["code"]
    assert "qat_pt.eval()" in code
    assert code.index("set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)") < \
        code.index("pre_export(qat_pt)") < code.index("evaluate(qat_bc)")
    assert "_FLOAT" not in code
    assert "FakeQuantState.VALIDATION" in check["text"]


def test_an_export_state_stated_in_the_case_needs_no_state_check(tmp_path):
    with example_path("export_qat_export_unknown") as source:
        data = yaml.safe_load((source / "case.yaml").read_text(encoding="utf-8"))
    for state, checked in (("unknown", True), ("validation", False)):
        folder = tmp_path / state
        folder.mkdir()
        (folder / "case.yaml").write_text(yaml.safe_dump({**data, "fake_quant_state": state}),
                                          encoding="utf-8")
        assert ("AN034" in rules(triage(folder, "en"))) is checked, state


@pytest.mark.parametrize("lang", LANGS)
def test_at_the_board_the_x86_run_comes_before_collecting_checklist_items(tmp_path, lang):
    folder = tmp_path / "board"
    folder.mkdir()
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
            "platform": {"chip": "J6M"},
            "stages": {"quantized_bc": {"metric": "mAP", "value": 0.45},
                       "board": {"metric": "mAP", "value": 0.40}}}
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    report = triage(folder, lang)
    assert (report["conclusion"]["stage"], report["conclusion"]["suspect"]) == \
        ("compile", "compile_or_board_not_split")
    order = [a["id"] for a in report["next_actions"]]
    assert order[0] == "evaluate_hbm_x86", order
    assert order.index("deploy_checklist") > 0
    assert "evaluate_hbm_on_x86" in calls(report["next_actions"][0]["code"])


@pytest.mark.parametrize("lang", LANGS)
def test_at_the_board_a_failed_item_comes_first_then_the_x86_run(tmp_path, lang):
    folder = deploy_case(tmp_path / "odd", CORRECT, {"quantized_bc": N, "board": A},
                         board={"height": 541})
    report = triage(folder, lang)
    assert report["conclusion"]["suspect"] == "nv12_even_size"
    order = [a["id"] for a in report["next_actions"]]
    assert order[:3] == ["fix_check:nv12_even_size", "evaluate_hbm_x86", "deploy_checklist"], order
