"""Knowledge revision 3 at deployment, one scenario per decision, through a full triage:
failed checklist items in the conclusion (R3.13) at NV12 insertion, qdq removal, compile
and the board; items that are only unknown; the Quantize-only removal code; and the
convert sensitivity run that needs two runs (R3.5).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.diagnosis.triage import triage_case
from tests.deploy.scripts import CORRECT, DYNAMIC_MODE, MISTAKES
from tests.diagnosis.test_deploy_audit import BOARD, TRAIN, make_case
from tests.qa.scenarios import cliff_rows, gradual_rows, sens_rows
from tests.qa.writers import write_compare, write_sensitivity

N, A = {"status": "normal"}, {"status": "abnormal"}
NV12_STAGES = {"quantized_bc": N, "nv12_bc": A}
QDQ_STAGES = {"quantized_bc": N, "qdq_removed_bc": A}
BOARD_STAGES = {"quantized_bc": N, "hbm_x86": N, "board": A}
# the script every NV12 scenario starts from, with the mode a YUV444-trained model needs
YUV444_OK = CORRECT.replace('mode="yuvbt601full2rgb"', "mode=None")
# Quantize/Dequantize removal as the correct script writes it, and variants of it
REMOVAL = '    quantized.functions[0].remove_io_op(op_types=["Dequantize"])\n'


def triage(folder: Path, lang: str = "en") -> dict:
    return triage_case(load_case(folder), lang=lang, environ={}, installed={}, cwd=folder)


def deploy_case(root: Path, script: str | None, stages: dict, train: dict | None = None,
                board: dict | None = None, **extra) -> Path:
    """A case with the audit tests' training and board sides, changed where given."""
    folder = make_case(root, script, **extra)
    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    data["stages"] = stages
    data["deploy"]["train"] = {**TRAIN, **(train or {})}
    data["deploy"]["board"] = {k: v for k, v in {**BOARD, **(board or {})}.items()
                               if v is not None}
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def item(report: dict, name: str) -> dict:
    return next(c for c in report["checklist"] if c["id"] == name)


def evidence_of(report: dict, rule: str) -> list[str]:
    return [e["text"] for e in report["conclusion"]["evidence"] if e["rule"] == rule]


def first_action(report: dict) -> dict:
    return report["next_actions"][0]


def action_ids(report: dict) -> list[str]:
    return [a["id"] for a in report["next_actions"]]


# --- R3.13: a failed checklist item in the conclusion -----------------------------------

def test_nv12_insertion_cites_the_wrong_mode_and_fixes_it_first(tmp_path):
    script = YUV444_OK.replace("mode=None", 'mode="yuvbt601full2rgb"')
    folder = deploy_case(tmp_path / "nv12", script, NV12_STAGES, train={"color": "yuv444"})
    report = triage(folder)
    c = report["conclusion"]
    assert (c["stage"], c["suspect"], c["determined"]) == \
        ("nv12_insertion", "preprocess_mode", True)
    assert c["evidence"][0]["rule"] == "ST061"
    # what failed, with its values: the mode and the training colour space
    [cited] = evidence_of(report, "DP065")
    assert "yuvbt601full2rgb" in cited and "YUV444" in cited
    assert first_action(report)["id"] == "fix_check:preprocess_mode"
    assert first_action(report)["kind"] == "checklist"
    # the fix comes before the general NV12 checks it is one of
    assert action_ids(report).index("nv12_insertion_checks") > 0
    assert item(report, "preprocess_mode")["status"] == "fail"
    assert item(report, "input_preprocessing")["status"] == "fail"


def test_nv12_insertion_with_the_right_mode_keeps_its_general_suspect(tmp_path):
    folder = deploy_case(tmp_path / "ok", YUV444_OK, NV12_STAGES, train={"color": "yuv444"})
    report = triage(folder)
    assert (report["conclusion"]["stage"], report["conclusion"]["suspect"]) == \
        ("nv12_insertion", "nv12_preprocess")
    assert item(report, "preprocess_mode")["status"] == "pass"
    assert not any(a["id"].startswith("fix_check:") for a in report["next_actions"])
    assert first_action(report)["id"] == "nv12_insertion_checks"


def test_a_compile_setting_never_becomes_the_nv12_suspect(tmp_path):
    """core_num acts at compile: it cannot explain a bc evaluated before compile."""
    script = YUV444_OK.replace("core_num=1", "core_num=2")
    folder = deploy_case(tmp_path / "core", script, NV12_STAGES, train={"color": "yuv444"})
    report = triage(folder)
    assert item(report, "core_num")["status"] == "fail"
    assert report["conclusion"]["suspect"] == "nv12_preprocess"
    assert not evidence_of(report, "DP090")
    assert not any(a["id"].startswith("fix_check:") for a in report["next_actions"])


def test_qdq_removal_before_convert_is_the_qdq_suspect(tmp_path):
    folder = deploy_case(tmp_path / "qdq", MISTAKES["qdq_before_convert"], QDQ_STAGES)
    report = triage(folder)
    c = report["conclusion"]
    assert (c["stage"], c["suspect"]) == ("qdq_removal", "qdq_after_convert")
    [cited] = evidence_of(report, "DP050")
    line = next(f["line"] for f in report["facts"] if f["type"] == "qdq_removal")
    assert f"line {line}" in cited and "before convert" in cited
    assert first_action(report)["id"] == "fix_check:qdq_after_convert"
    assert item(report, "pre_post_nodes")["status"] == "fail"


def test_compile_cites_the_failure_with_its_values_and_fixes_it_first(tmp_path):
    folder = make_case(tmp_path / "compile", MISTAKES["wrong_mode"])
    for lang, words in (("en", "yuvbt601full2bgr"), ("zh", "yuvbt601full2bgr")):
        report = triage(folder, lang)
        c = report["conclusion"]
        assert (c["stage"], c["suspect"]) == ("user_side", "preprocess_mode")
        assert [e["rule"] for e in c["evidence"][:2]] == ["ST150", "DP063"]
        assert words in c["evidence"][1]["text"]
        ids = action_ids(report)
        assert ids[0] == "fix_check:preprocess_mode"
        assert ids.index("deploy_checklist") > 0 and ids.index("user_side_checks") > 0


def test_board_with_an_odd_nv12_size_blames_that_size_not_board_integration(tmp_path):
    folder = deploy_case(tmp_path / "board", CORRECT, BOARD_STAGES, board={"height": 541})
    report = triage(folder)
    c = report["conclusion"]
    assert (c["stage"], c["suspect"]) == ("user_side", "nv12_even_size")
    [cited] = evidence_of(report, "DP071")
    assert "541×960" in cited
    assert first_action(report)["id"] == "fix_check:nv12_even_size"
    padding = item(report, "padding")
    assert padding["status"] == "fail" and [p["id"] for p in padding["parts"]] == ["nv12_even_size"]


def test_several_failures_each_get_their_fix_before_anything_else(tmp_path):
    script = MISTAKES["wrong_mode"].replace("core_num=1", "core_num=2")
    report = triage(make_case(tmp_path / "two", script))
    fixes = [a for a in report["next_actions"] if a["id"].startswith("fix_check:")]
    assert {a["id"] for a in fixes} == {"fix_check:preprocess_mode", "fix_check:core_num"}
    assert report["next_actions"][:2] == fixes
    assert {"DP063", "DP090"} <= {e["rule"] for e in report["conclusion"]["evidence"]}


def test_a_failure_at_convert_is_not_cited_there(tmp_path):
    """Not a deployment stage: the step-0 verdict and no checklist in the conclusion."""
    folder = make_case(tmp_path / "convert", MISTAKES["wrong_mode"],
                       user_checks={"same_march": "no"})
    data = yaml.safe_load((folder / "case.yaml").read_text())
    data["stages"] = {"qat_bc": N, "quantized_bc": A}
    (folder / "case.yaml").write_text(yaml.safe_dump(data))
    report = triage(folder)
    assert report["conclusion"]["suspect"] == "inconsistent_inputs_between_stages"
    assert not any(a["id"].startswith("fix_check:") for a in report["next_actions"])


# --- R3.13: an item whose finer checks are all unknown is unknown -----------------------

def test_unknown_finer_checks_leave_their_item_unknown(tmp_path):
    """The mode cannot be read, the training colour is not known: nothing failed."""
    folder = deploy_case(tmp_path / "unknown", DYNAMIC_MODE, NV12_STAGES,
                         train={"color": None, "mean": None, "std": None})
    data = yaml.safe_load((folder / "case.yaml").read_text())
    data["deploy"]["train"] = {k: v for k, v in data["deploy"]["train"].items() if v is not None}
    (folder / "case.yaml").write_text(yaml.safe_dump(data))
    report = triage(folder)
    assert item(report, "preprocess_mode")["status"] == "unknown"
    assert item(report, "input_preprocessing")["status"] != "fail"
    assert report["conclusion"]["suspect"] == "nv12_preprocess"


def test_padding_is_unknown_when_the_board_size_is_unknown(tmp_path):
    """The training size is not the board's NV12 size: an odd training height proves
    nothing, and padding whose own policies are unknown stays unknown."""
    folder = deploy_case(tmp_path / "pad", CORRECT, BOARD_STAGES,
                         train={"height": 375, "width": 1242, "padding": None},
                         board={"height": None, "width": None, "padding": None})
    report = triage(folder)
    assert item(report, "nv12_even_size")["status"] == "unknown"
    assert item(report, "padding")["status"] == "unknown"
    from qcdoctor.catalogues import checklist_items
    assert report["conclusion"]["suspect"] not in checklist_items()     # nothing failed


@pytest.mark.parametrize("train,board", [("unknown", "none"), ("none", "unknown"),
                                         ("unknown", "unknown")])
def test_a_value_written_as_unknown_is_never_compared(tmp_path, train, board):
    folder = deploy_case(tmp_path / "u", CORRECT, BOARD_STAGES, train={"padding": train},
                         board={"padding": board})
    report = triage(folder)
    assert item(report, "padding")["status"] == "unknown"
    assert report["conclusion"]["suspect"] == "board_integration"


def test_normalisation_without_the_scripts_divisor_is_unknown(tmp_path):
    """mean/std written for a divisor the call leaves out: not compared against 1."""
    script = CORRECT.replace("divisor=1,", "")
    assert script != CORRECT
    report = triage(make_case(tmp_path / "div", script))
    norm = next(f for f in report["facts"]
                if f["type"] == "deploy_compare" and f["item"] == "normalisation")
    assert norm["equal"] == "unknown" and "x / unknown" in norm["board"]


# --- the code for a Quantize-only removal -----------------------------------------------

@pytest.mark.parametrize("removal,quantizes,dequantizes", [
    ('op_types=["Quantize"]', True, False),
    ('op_types=["Dequantize"]', False, True),
    ('op_types=["Quantize", "Dequantize"]', True, True),
])
def test_qdq_compare_code_handles_only_what_was_removed(tmp_path, removal, quantizes,
                                                        dequantizes):
    script = CORRECT.replace('op_types=["Dequantize"]', removal)
    report = triage(deploy_case(tmp_path / "q", script, QDQ_STAGES))
    assert report["conclusion"]["stage"] == "qdq_removal"
    [action] = [a for a in report["next_actions"] if a["id"] == "qdq_compare"]
    code = action["code"]
    compile(code, "qdq_compare", "exec")
    assert ("quantize(x, input_scale)" in code) == quantizes
    assert ("dequantize(out," in code) == dequantizes
    assert "REMOVED" not in code                       # known: nothing left to set


def test_qdq_removal_over_two_calls_counts_both(tmp_path):
    script = CORRECT.replace(REMOVAL, REMOVAL + REMOVAL.replace("Dequantize", "Quantize"))
    report = triage(deploy_case(tmp_path / "two", script, QDQ_STAGES))
    removals = [f for f in report["facts"] if f["type"] == "qdq_removal"]
    assert len(removals) == 2
    assert {(f["quantize"], f["dequantize"]) for f in removals} == {("yes", "yes")}
    code = next(a for a in report["next_actions"] if a["id"] == "qdq_compare")["code"]
    assert "quantize(x, input_scale)" in code and "dequantize(out," in code


def test_qdq_compare_code_asks_when_the_removal_is_not_known(tmp_path):
    folder = deploy_case(tmp_path / "none", None, QDQ_STAGES)
    report = triage(folder)
    code = next(a for a in report["next_actions"] if a["id"] == "qdq_compare")["code"]
    compile(code, "qdq_compare", "exec")
    assert "QUANTIZE_REMOVED = None" in code and "if DEQUANTIZE_REMOVED:" in code


# --- R3.5: two runs at convert --------------------------------------------------------

CONVERT = {"evidence": ["dataset_eval"], "badcase": "dataset_only", "retrain": "yes",
           "platform": {"chip": "J6E"},
           "versions": {"horizon-plugin-pytorch": "3.1.5", "horizon-plugin-profiler": "3.1.5",
                        "hbdk4-compiler": "4.4.2"},
           "stages": {"qat_bc": {"metric": "mAP", "value": 0.449},
                      "quantized_bc": {"metric": "mAP", "value": 0.391}}}
RUN_1 = {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
         "out_dir": "qa_convert"}
SENS = {"type": "convert", "baseline": "qat_export", "analysis": "quantized_bc",
        "out_dir": "qa_convert_sens", "sensitivity": True}


def convert_case(root: Path, sens: dict, sens_compare=gradual_rows, **extra) -> Path:
    """Run 1 (qat.bc vs quantized.bc) spread evenly; the sensitivity run's folder with
    ``sens_compare`` rows and a flat sensitivity: nothing located unless those say so."""
    root.mkdir(parents=True, exist_ok=True)
    write_compare(root / RUN_1["out_dir"], gradual_rows())
    write_compare(root / sens["out_dir"], sens_compare())
    write_sensitivity(root / sens["out_dir"],
                      sens_rows([(f"decoder.layer{i}.linear", 0.01 - i * 1e-4) for i in range(8)]))
    data = {"schema": "qcdoctor/case-v1", **CONVERT, "analyses_run": [RUN_1, sens], **extra}
    (root / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return root


@pytest.mark.parametrize("reason", [{"has_task_input": True}, {"input_format_differs": True}])
def test_a_one_run_convert_sensitivity_is_redone_in_two_runs_first(tmp_path, reason):
    report = triage(convert_case(tmp_path / "c", SENS, **reason))
    assert report["conclusion"]["stage"] == "convert"
    assert "input_format_mismatch" in {p["id"] for p in report["pitfalls"]}
    redo = first_action(report)
    assert (redo["id"], redo["baseline"], redo["analysis"]) == \
        ("qa_convert_two_runs", "qat_export", "quantized_bc")
    code = redo["code"]
    compile(code, "redo", "exec")
    assert 'out_dir="./qa_convert_sens"' in code                     # that run, redone
    assert "run(run_baseline_model=True, run_analysis_model=False)" in code
    assert "run(run_baseline_model=False, run_analysis_model=True)" in code
    assert code.index("sensitivity()") > code.index("run_analysis_model=True")
    # bc_editor never rests on the invalid run
    assert not any(a["kind"] == "bc_editor" for a in report["next_actions"])


def test_an_origin_the_invalid_run_located_gets_no_bc_editor(tmp_path):
    report = triage(convert_case(tmp_path / "cliff", SENS, sens_compare=cliff_rows,
                                 has_task_input=True))
    assert any(f["type"] == "layer_origin" and f["pattern"] == "cliff" for f in report["facts"])
    assert "qa_convert_two_runs" in action_ids(report)
    assert not any(a["kind"] == "bc_editor" for a in report["next_actions"])


def test_a_convert_sensitivity_in_two_runs_is_valid(tmp_path):
    report = triage(convert_case(tmp_path / "ok", {**SENS, "separate_runs": True},
                                 has_task_input=True))
    assert "qa_convert_two_runs" not in action_ids(report)
    assert "input_format_mismatch" not in {p["id"] for p in report["pitfalls"]}
    assert any(a["kind"] == "bc_editor" for a in report["next_actions"])


def test_same_inputs_need_no_second_run(tmp_path):
    report = triage(convert_case(tmp_path / "same", SENS))
    assert "qa_convert_two_runs" not in action_ids(report)
    assert any(a["kind"] == "bc_editor" for a in report["next_actions"])


def test_a_one_run_export_analysis_is_redone_first_too(tmp_path):
    run = {"type": "export", "baseline": "qat_export", "analysis": "qat_bc",
           "out_dir": "qa_export", "sensitivity": True}
    data = {**CONVERT, "stages": {"qat_export": {"metric": "mAP", "value": 0.449},
                                  "qat_bc": {"metric": "mAP", "value": 0.391}},
            "analyses_run": [run], "input_format_differs": True}
    root = tmp_path / "export"
    write_compare(root / "qa_export", gradual_rows())
    (root / "case.yaml").write_text(yaml.safe_dump({"schema": "qcdoctor/case-v1", **data}))
    report = triage(root)
    assert report["conclusion"]["stage"] == "export"
    redo = first_action(report)
    assert redo["id"] == "qa_export_two_runs" and 'out_dir="./qa_export"' in redo["code"]
