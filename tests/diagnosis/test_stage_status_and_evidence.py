"""Knowledge revision 2: the stage decision (§5), next actions (§6), the strategy (§7).

One scenario per decision: a case dict is triaged end to end and the conclusion, the
order of the next actions and the report texts are checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.metric_direction import metric_direction
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from qcdoctor.errors import QcdoctorError
from qcdoctor.vocabulary import COST_CLASSES
from tests.conftest import triage_dict
from tests.qa.scenarios import build

N, A = {"status": "normal"}, {"status": "abnormal"}
CONFIRMED = {"same_checkpoint": "yes", "same_qconfig": "yes", "same_march": "yes",
             "same_prepost": "yes"}


def _case(stages: dict, **extra) -> dict:
    return {"evidence": ["dataset_eval"], "badcase": "available", "symptom": "drop",
            "stages": stages, **extra}


def _stage(report: dict, name: str) -> dict:
    return next(f for f in report["facts"] if f["type"] == "stage" and f["stage"] == name)


def _conclusion(report: dict) -> tuple[str, str]:
    return report["conclusion"]["stage"], report["conclusion"]["suspect"]


def _compiles(report: dict) -> None:
    for action in report["next_actions"]:
        if action.get("code"):
            compile(action["code"], action["id"], "exec")


def _mAP(**values) -> dict:
    return {stage: {"metric": "mAP", "value": v} for stage, v in values.items()}


# --- §5 tolerance boundary -------------------------------------------------------------

def test_a_loss_equal_to_the_tolerance_is_normal():
    report = triage_dict(_case(_mAP(qat=0.45, qat_bc=0.4455)), lang="zh")
    assert _stage(report, "qat_bc")["status"] == "normal"
    md = render(report, "md")
    assert "相对 qat.pt 下降 0.0045，在容差 0.0045 内" in md and "超过容差" not in md
    beyond = triage_dict(_case(_mAP(qat=0.45, qat_bc=0.4454)))
    assert _stage(beyond, "qat_bc")["status"] == "abnormal"
    assert "drop 0.0046 vs qat.pt exceeds tolerance 0.0045" in render(beyond, "md")


def test_an_improvement_is_written_as_an_improvement():
    report = triage_dict(_case(_mAP(qat=0.45, qat_bc=0.451)), lang="zh")
    md = render(report, "md")
    assert "相对 qat.pt 提升 0.001" in md and "下降 -" not in md
    assert "improves by 0.001 on qat.pt" in render(triage_dict(_case(_mAP(qat=0.45, qat_bc=0.451))), "md")


# --- §5 metric direction ---------------------------------------------------------------

@pytest.mark.parametrize("name,higher", [
    ("error_rate", False), ("val-loss", False), ("mATE", False), ("mAOE", False), ("WER", False),
    ("AbsRel", False), ("sq_rel", False), ("missRate", False), ("latencyMs", False),
    ("mean distance", False), ("top1.err", False),
    ("recall", True), ("mAP", True), ("NDS", True), ("mIoU", True), ("F1", True), ("top1", True),
])
def test_metric_direction_from_whole_tokens_of_the_name(name, higher):
    assert metric_direction(name, None) == (higher, "metric name")


@pytest.mark.parametrize("name", ["success_rate", "accurate", "errand_score"])
def test_substrings_never_decide_and_unknown_tokens_leave_the_direction_open(name):
    """knowledge.md §16 R3.1: no whole token known either way: the direction is unknown
    (a substring such as "err" in "errand" or "acc" in "accurate" does not count)."""
    assert metric_direction(name, None) == (None, "unknown")


def test_higher_is_better_in_the_case_wins():
    assert metric_direction("error_rate", True) == (True, "case")


def test_a_rising_error_rate_is_a_drop():
    stages = {s: {"metric": "error_rate", "value": v}
              for s, v in (("qat", 0.100), ("qat_export", 0.1005), ("qat_bc", 0.131))}
    report = triage_dict(_case(stages))
    assert _stage(report, "qat_bc")["status"] == "abnormal"
    assert _conclusion(report) == ("export", "hbir_export")
    md = render(report, "md")
    assert "Metric direction: error_rate: lower is better, from the metric name" in md
    assert "rises 0.0305 above qat.export.pt (lower is better), beyond tolerance" in md
    zh = render(triage_dict(_case(stages), lang="zh"), "md")
    assert "指标方向：error_rate 越低越好（由指标名判断）" in zh
    assert "相对 qat.export.pt 升高 0.0305（越低越好），超过容差" in zh and "下降" not in zh.split(
        "| 阶段 |")[1].split("## ")[0]


# --- §5 calibration is a side step -----------------------------------------------------

def test_a_calibration_loss_that_qat_recovers_is_a_finding():
    report = triage_dict(_case(_mAP(float=0.50, calib=0.40, qat=0.497, qat_bc=0.496,
                                    quantized_bc=0.45)))
    assert _conclusion(report) == ("convert", "convert_requantize")
    assert "ST011" in {f["rule"] for f in report["findings"]}
    assert not any(f["type"] == "non_monotonic" for f in report["facts"])


def test_calibration_still_decides_while_qat_is_unknown():
    report = triage_dict(_case(_mAP(float=0.50, calib=0.40)))
    assert _conclusion(report) == ("calibration", "calibration_precision")


# --- §5 a later stage clearly better ---------------------------------------------------

def test_a_later_stage_clearly_better_is_an_evaluation_inconsistency():
    report = triage_dict(_case(_mAP(qat=0.45, qat_export=0.448, qat_bc=0.478, quantized_bc=0.47),
                               user_checks=CONFIRMED))
    assert _conclusion(report) == ("undetermined", "evaluation_inconsistent")
    assert "ST131" in {e["rule"] for e in report["conclusion"]["evidence"]}
    assert report["next_actions"][0]["id"] == "recheck_evaluation"
    assert "qat.export.pt" in report["next_actions"][0]["text"]


def test_qat_recovering_calibration_is_no_rise():
    report = triage_dict(_case({**_mAP(float=0.50, calib=0.40, qat=0.497), "board": N}))
    assert _conclusion(report) == ("none", "")


# --- §5 "none" needs the board ---------------------------------------------------------

def test_normal_early_stages_are_not_none():
    report = triage_dict(_case({"qat": N, "qat_bc": N}, user_checks=CONFIRMED))
    assert _conclusion(report) == ("undetermined", "abnormal_stage_not_evaluated")
    assert "stage_results" in [m["id"] for m in report["missing"]]
    first = report["next_actions"][0]
    assert (first["id"], first["stage_to_evaluate"]) == ("evaluate_next_stage", "quantized_bc")
    later = triage_dict(_case({"qat": N, "qat_bc": N, "quantized_bc": N}, user_checks=CONFIRMED))
    assert later["next_actions"][0]["stage_to_evaluate"] == "hbm_x86"
    zh = render(triage_dict(_case({"qat": N, "qat_bc": N}), lang="zh"), "md")
    summary = next(line for line in zh.splitlines() if line.startswith("- **"))
    assert "暂不能判断" in summary and "无一致性问题" not in summary


def test_none_when_the_board_is_evaluated_and_normal():
    report = triage_dict(_case({"qat": N, "quantized_bc": N, "board": N}))
    assert _conclusion(report) == ("none", "")
    assert report["conclusion"]["determined"] is True


# --- §5 dump evidence ------------------------------------------------------------------

def _write_dump(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    array.astype(np.float32).tofile(path)
    path.with_name(path.name + ".json").write_text(json.dumps({"dtype": "float32",
                                                               "shape": list(array.shape)}))


def _dump_case(root: Path, stages: dict, dumps: dict[str, np.ndarray]) -> dict:
    folders = {}
    for stage, array in dumps.items():
        _write_dump(root / "dumps" / stage / "model_infer_output_0.bin", array)
        folders[stage] = f"dumps/{stage}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "case.yaml").write_text(yaml.safe_dump({
        **_case(stages, user_checks=CONFIRMED), "artifacts": {"dumps": folders}}))
    return triage_case(load_case(root), lang="en", environ={}, installed={}, cwd=root)


RNG = np.random.default_rng(7)
BASE = RNG.standard_normal(256).astype(np.float32)


def test_identical_x86_and_board_dumps_give_hbm_x86_the_boards_status(tmp_path):
    report = _dump_case(tmp_path, {"quantized_bc": N, "board": A},
                        {"hbm_x86": BASE, "board": BASE.copy()})
    x86 = _stage(report, "hbm_x86")
    assert (x86["status"], x86["derived"], x86["basis"]) == ("abnormal", True, "dump_identical")
    assert "dumps/hbm_x86 vs dumps/board" in x86["source"]
    assert _conclusion(report) == ("compile", "compile_config_or_input_adaptation")
    assert "output dumps bit-identical with board" in render(report, "md")
    assert not any(a["id"] == "evaluate_hbm_x86" for a in report["next_actions"])


def test_different_x86_and_board_dumps_point_at_the_board(tmp_path):
    report = _dump_case(tmp_path, {"quantized_bc": N, "board": A},
                        {"hbm_x86": BASE, "board": BASE * 0.5 + 0.1})
    assert _conclusion(report) == ("user_side", "board_integration")
    assert report["conclusion"]["evidence"][0]["rule"] == "ST092"


def test_consistent_bc_and_hbm_dumps_point_at_pre_and_post_processing(tmp_path):
    report = _dump_case(tmp_path, {"quantized_bc": N, "board": A},
                        {"quantized_bc": BASE, "board": BASE + np.float32(1e-6)})
    assert _conclusion(report) == ("user_side", "pre_post_processing")
    assert report["conclusion"]["evidence"][0]["rule"] == "ST093"


# --- §6 order of next actions ----------------------------------------------------------

J6E = {"platform": {"chip": "J6E"}, "versions": {"hbdk4-compiler": "4.4.2",
                                                 "horizon-plugin-pytorch": "3.1.5"}}


def _costs(report: dict) -> list[str]:
    return [a["cost"] for a in report["next_actions"]]


def test_retraining_comes_after_analyses_that_need_none():
    report = triage_dict(_case({"qat_bc": N, "quantized_bc": A}, retrain="yes",
                               user_checks=CONFIRMED, **J6E))
    assert report["next_actions"][0]["id"] == "qa_convert"
    assert _costs(report) == sorted(_costs(report), key=COST_CLASSES.index)
    assert _costs(report)[-1] == "retrain"
    assert report["consistency"]["level"] == 1      # the level keeps its own section
    _compiles(report)


def test_qconfig_changes_rank_after_the_analysis_they_follow(tmp_path):
    """Without retraining (R3.7) a qconfig change keeps its cost class, the last; with it,
    the remedy of the op the analysis located comes first (R3.6)."""
    import yaml
    folder = build("truncation", tmp_path)
    case_file = folder / "case.yaml"
    data = yaml.safe_load(case_file.read_text(encoding="utf-8"))
    case_file.write_text(yaml.safe_dump({**data, "retrain": "no"}), encoding="utf-8")
    report = triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)
    costs = _costs(report)
    assert costs == sorted(costs, key=COST_CLASSES.index)
    fixed = next(i for i, a in enumerate(report["next_actions"]) if a["id"].startswith("fixed_scale:"))
    assert report["next_actions"][fixed]["cost"] == "retrain"
    assert all(a["cost"] != "retrain" for a in report["next_actions"][:fixed])
    case_file.write_text(yaml.safe_dump({**data, "retrain": "yes"}), encoding="utf-8")
    report = triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)
    assert report["next_actions"][0]["id"].startswith("fixed_scale:")


def test_no_bad_case_holds_back_every_quant_analysis():
    report = triage_dict(_case({"qat_bc": N, "quantized_bc": A}, badcase="none",
                               platform={"chip": "J6P"}, user_checks=CONFIRMED))
    kinds = [a["kind"] for a in report["next_actions"]]
    assert "quant_analysis" not in kinds
    assert report["next_actions"][0]["id"] == "obtain_badcase"
    dataset = triage_dict(_case({"qat_bc": N, "quantized_bc": A}, badcase="dataset_only",
                                platform={"chip": "J6P"}, user_checks=CONFIRMED))
    code = next(a for a in dataset["next_actions"] if a["kind"] == "quant_analysis")["code"]
    assert "auto_find_bad_case(dataloader)" in code


def test_lut_bisection_only_at_pre_export(tmp_path):
    convert = triage_case(load_case(build("lut", tmp_path)), lang="en", environ={},
                          installed={}, cwd=tmp_path)
    assert not any(a["kind"] == "lut_bisect" for a in convert["next_actions"])
    finding = next(f for f in convert["findings"] if f["rule"] == "LY045")
    assert "quantized_forward = False bisection does not apply" in finding["text"]
    pre = triage_dict(_case({"qat": N, "qat_export": A}))
    assert "lut_bisect" in {a["kind"] for a in pre["next_actions"]}


# --- §6 two runs and folders -----------------------------------------------------------

def _convert_code(**extra) -> str:
    report = triage_dict(_case({"qat_bc": N, "quantized_bc": A}, **extra))
    _compiles(report)
    return next(a for a in report["next_actions"] if a["id"] == "qa_convert")["code"]


def test_convert_bc_vs_bc_takes_one_run_and_the_sensitivity_run_its_own_folder():
    code = _convert_code(badcase="dataset_only")
    first, sens = code.split("qa_sens = QuantAnalysis(")
    assert 'out_dir="./qa_convert"' in first and "run_baseline_model" not in first
    assert 'out_dir="./qa_convert_sens"' in sens and "run_baseline_model" not in sens
    assert 'load_bad_case("./qa_convert/all_badcase_info.pt")' in sens


@pytest.mark.parametrize("flag", ["input_format_differs", "has_task_input"])
def test_torch_vs_bc_sensitivity_takes_two_runs(flag):
    code = _convert_code(badcase="dataset_only", **{flag: True})
    first, sens = code.split("qa_sens = QuantAnalysis(")
    assert "run_baseline_model" not in first                     # qat.bc vs quantized.bc
    assert sens.index("set_bad_case(pt_badcase)") < sens.index(
        "run(run_baseline_model=True, run_analysis_model=False)") < sens.index(
        'load_bad_case("./qa_convert/all_badcase_info.pt")') < sens.index(
        "run(run_baseline_model=False, run_analysis_model=True)")
    given = _convert_code(badcase="available", **{flag: True})
    assert "qa_sens.set_bad_case(badcase)" in given and "load_bad_case" not in given


def test_export_analysis_with_a_task_list_takes_two_runs():
    report = triage_dict(_case({"qat_export": N, "qat_bc": A}, has_task_input=True))
    code = next(a for a in report["next_actions"] if a["id"] == "qa_export")["code"]
    assert "run(run_baseline_model=True, run_analysis_model=False)" in code
    _compiles(report)


def test_a_one_run_export_analysis_with_a_task_list_still_gets_a_next_step():
    run = {"type": "export", "baseline": "qat_export", "analysis": "qat_bc", "out_dir": "qa_export",
           "sensitivity": True}
    report = triage_dict(_case({"qat_export": N, "qat_bc": A}, has_task_input=True,
                               analyses_run=[run], user_checks=CONFIRMED))
    ids = [a["id"] for a in report["next_actions"]]
    # knowledge.md §17 R4.5: the invalid run drives nothing but its redo
    assert ids[0] == "qa_export_two_runs" and "export_graph_inspection" not in ids
    assert "run(run_baseline_model=False" in report["next_actions"][0]["code"]
    # the export state stated: no step-0 state check beside it (knowledge.md §17 R4.10)
    done = triage_dict(_case({"qat_export": N, "qat_bc": A}, has_task_input=True,
                             analyses_run=[{**run, "separate_runs": True}], user_checks=CONFIRMED,
                             fake_quant_state="validation"))
    assert [a["id"] for a in done["next_actions"]] == ["export_graph_inspection"]


# --- §6 / §13 the deployment checklist and keep-lists ----------------------------------

def _keep(report: dict) -> set[str]:
    return {k["name"] for k in report["artifacts"]["keep"]}


def test_a_march_mismatch_at_convert_gets_no_deployment_checklist():
    report = triage_dict(_case({"qat_bc": N, "quantized_bc": A},
                               user_checks={**CONFIRMED, "same_march": "no"}))
    assert _conclusion(report) == ("user_side", "inconsistent_inputs_between_stages")
    assert report["checklist"] == []
    assert "deploy_checklist" not in [a["id"] for a in report["next_actions"]]
    assert "quantized.bc" in _keep(report) and "hbm" not in _keep(report)


def test_a_float_export_state_keeps_the_export_list():
    report = triage_dict(_case({"qat": N, "qat_bc": A}, fake_quant_state="float"))
    assert _conclusion(report) == ("user_side", "export_state")
    assert report["checklist"] == [] and "qat.export.pt" in _keep(report)
    assert "hbm" not in _keep(report)
    assert "不适用" not in render(triage_dict(_case({"qat": N, "qat_bc": A},
                                                  fake_quant_state="float"), lang="zh"), "md")
    # wrong at export even when the drop is seen on the board: the export list, no checklist
    board = triage_dict(_case({"hbm_x86": N, "board": A}, fake_quant_state="float"))
    assert _conclusion(board) == ("user_side", "export_state")
    assert board["checklist"] == [] and "qat.export.pt" in _keep(board) and "hbm" not in _keep(board)


def test_a_board_problem_keeps_the_checklist_and_the_deployment_list():
    report = triage_dict(_case({"hbm_x86": N, "board": A}))
    assert _conclusion(report) == ("user_side", "board_integration")
    assert len(report["checklist"]) == 14
    assert "deploy_checklist" in [a["id"] for a in report["next_actions"]]
    assert "hbm" in _keep(report)


def _pitfalls(report: dict) -> list[str]:
    return [p["id"] for p in report["pitfalls"]]


@pytest.mark.parametrize("first_abnormal, deployment", [
    ("qat_export", False), ("quantized_bc", False), ("nv12_bc", True), ("qdq_removed_bc", True),
    ("hbm_x86", True), ("board", True)])
def test_the_deployment_side_is_said_once_by_the_stage_summary(first_abnormal, deployment):
    """The rules and the report read "a deployment problem" from this one flag."""
    report = triage_dict(_case({"qat": N, first_abnormal: A}))
    [summary] = [f for f in report["facts"] if f["type"] == "stage_summary"]
    assert summary["first_abnormal"] == first_abnormal
    assert summary["deployment_side"] is deployment


def test_quant_analysis_is_a_pitfall_only_for_a_deployment_problem():
    run = [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc"}]
    # user side, found at convert or at export: QuantAnalysis serves those stages
    march = triage_dict(_case({"qat_bc": N, "quantized_bc": A}, analyses_run=run,
                              user_checks={**CONFIRMED, "same_march": "no"}))
    assert _conclusion(march)[0] == "user_side"
    assert "quantanalysis_for_deploy" not in _pitfalls(march)
    export = triage_dict(_case({"qat": N, "qat_bc": A}, fake_quant_state="float",
                               analyses_run=run))
    assert _conclusion(export) == ("user_side", "export_state")
    assert "quantanalysis_for_deploy" not in _pitfalls(export)
    # a drop on the board, or at compile: the checklist is the tool, not QuantAnalysis
    board = triage_dict(_case({"hbm_x86": N, "board": A}, analyses_run=run))
    assert _conclusion(board) == ("user_side", "board_integration")
    assert "quantanalysis_for_deploy" in _pitfalls(board)
    compiled = triage_dict(_case({"quantized_bc": N, "hbm_x86": A}, analyses_run=run))
    assert _conclusion(compiled)[0] == "compile"
    assert "quantanalysis_for_deploy" in _pitfalls(compiled)


# --- §7 the strategy only around convert -----------------------------------------------

def test_no_strategy_when_only_the_board_is_wrong():
    report = triage_dict(_case({"quantized_bc": N, "board": A}, retrain="yes", **J6E))
    assert _conclusion(report)[0] == "compile"
    assert report["consistency"]["applicable"] is False and report["consistency"]["rule"] == "CS014"
    assert not any(a["kind"] == "consistency_strategy" for a in report["next_actions"])


def test_flat_sensitivity_recommends_the_strategy_only_where_it_applies(tmp_path):
    def triage_flat(chip, where):
        folder = build("flat", where)
        data = yaml.safe_load((folder / "case.yaml").read_text())
        (folder / "case.yaml").write_text(yaml.safe_dump({**data, "platform": {"chip": chip}}))
        return triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)
    j6p = triage_flat("J6P", tmp_path / "p")
    flat = next(f for f in j6p["findings"] if f["rule"] == "LY042")
    assert "strategy" not in flat["text"] and "LY046" not in {f["rule"] for f in j6p["findings"]}
    assert "LY046" in {f["rule"] for f in triage_flat("J6E", tmp_path / "e")["findings"]}


# --- §7 old numbering ------------------------------------------------------------------

CONVERT_J6E = dict(stages={"qat_bc": N, "quantized_bc": A}, retrain="yes", **J6E)


@pytest.mark.parametrize("extra,rule,level,between", [
    (dict(consistency_levels_tried=[4]), "CS024", None, False),          # old 4 = new 2
    (dict(consistency_levels_tried=[3]), "CS023", 2, True),              # between new 1 and 2
    (dict(consistency_levels_tried=[2], consistency_numbering="old"), "CS023", 2, False),
    (dict(consistency_levels_tried=[1], consistency_numbering="old"), "CS022", 1, True),
])
def test_old_level_numbers_are_read_in_the_old_numbering(extra, rule, level, between):
    report = triage_dict(_case(**CONVERT_J6E, **extra))
    assert (report["consistency"]["rule"], report["consistency"]["level"]) == (rule, level)
    findings = {f["rule"] for f in report["findings"]}
    assert "CS027" in findings and ("CS028" in findings) == between


def test_an_old_only_level_with_new_numbering_is_refused():
    with pytest.raises(QcdoctorError) as err:
        triage_dict(_case(**CONVERT_J6E, consistency_levels_tried=[3], consistency_numbering="new"))
    text = err.value.render()
    assert "consistency_levels_tried" in text and "consistency_numbering: old" in text


@pytest.mark.parametrize("plugin,line", [
    ("3.1.5", "ConsistencyStrategy.set_consistency_level(1)\n"),
    ("3.0.9", "ConsistencyStrategy.set_consistency_level(2)\n"),
    (None, "ConsistencyStrategy.set_consistency_level(1)    # old numbering: 2\n"),
])
def test_generated_code_writes_the_level_in_the_plugins_numbering(plugin, line):
    versions = {"hbdk4-compiler": "4.4.2", **({"horizon-plugin-pytorch": plugin} if plugin else {})}
    report = triage_dict(_case(**{**CONVERT_J6E, "versions": versions}))
    action = next(a for a in report["next_actions"] if a["kind"] == "consistency_strategy")
    assert line in action["code"]
    _compiles(report)


def test_versions_compare_as_pep_440():
    report = triage_dict(_case(**{**CONVERT_J6E, "versions": {"hbdk4-compiler": "4.4.2rc1"}}))
    assert report["consistency"]["rule"] == "CS012"
    assert report["consistency"]["prerequisites_met"] is False
