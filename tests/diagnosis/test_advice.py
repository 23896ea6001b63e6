"""Gate, strategy and pitfall behaviour of whole cases (knowledge.md §4, §7, §12)."""

from __future__ import annotations

import pytest

from tests.conftest import triage_dict

N, A = {"status": "normal"}, {"status": "abnormal"}
CONVERT = {"evidence": ["dataset_eval"], "badcase": "available", "symptom": "drop",
           "stages": {"qat_bc": N, "quantized_bc": A}}


def _with(**extra) -> dict:
    return {**CONVERT, **extra}


def _missing(report) -> list[str]:
    return [m["id"] for m in report["missing"]]


def test_convert_without_platform_asks_for_it_but_keeps_the_stage():
    report = triage_dict(_with(badcase="none"))
    assert report["conclusion"]["stage"] == "convert"
    assert {"platform", "badcase", "versions"} <= set(_missing(report))
    assert report["consistency"]["applicable"] is None


def test_platform_is_not_asked_at_pre_export():
    report = triage_dict(_with(stages={"qat": N, "qat_export": A}))
    assert "platform" not in _missing(report)


@pytest.mark.parametrize("extra,level,retrain,rule", [
    (dict(retrain="no"), 0, False, "CS020"),
    (dict(retrain="yes"), 1, True, "CS022"),
    (dict(retrain="yes", consistency_levels_tried=[0]), 1, True, "CS022"),
    (dict(retrain="yes", consistency_level=1), 2, True, "CS023"),
    (dict(retrain="unknown"), 0, False, "CS025"),
    (dict(retrain="yes", consistency_levels_tried=[1, 2]), None, None, "CS024"),
    (dict(retrain="no", consistency_levels_tried=[0]), None, True, "CS021"),
])
def test_strategy_level_on_j6e(extra, level, retrain, rule):
    report = triage_dict(_with(platform={"chip": "J6E"},
                               versions={"hbdk4-compiler": "4.4.2"}, **extra))
    c = report["consistency"]
    assert (c["rule"], c["level"], c["requires_retrain"], c["applicable"]) == \
        (rule, level, retrain, True)
    if level is not None:
        action = next(a for a in report["next_actions"] if a["kind"] == "consistency_strategy")
        assert f"set_consistency_level({level})" in action["code"]
        assert action["code"].index("set_consistency_level") < action["code"].index("prepare(")


def test_strategy_needs_the_compiler_version():
    too_old = triage_dict(_with(platform={"chip": "J6M"}, versions={"hbdk4-compiler": "4.4.1"},
                                retrain="yes"))
    assert (too_old["consistency"]["prerequisites_met"], too_old["consistency"]["level"]) == \
        (False, None)
    unknown = triage_dict(_with(platform={"chip": "J6M"}, retrain="yes"))
    assert unknown["consistency"]["prerequisites_met"] is None
    assert "versions" in _missing(unknown)


def test_no_strategy_on_j6p():
    report = triage_dict(_with(platform={"chip": "J6P"}, retrain="yes"))
    assert report["consistency"]["applicable"] is False
    assert {a["kind"] for a in report["next_actions"]} >= {"quant_analysis", "bc_editor"}
    assert not any(a["kind"] == "consistency_strategy" for a in report["next_actions"])


def test_quant_analysis_code_follows_input_handling():
    split = triage_dict(_with(input_format_differs=True, has_task_input=True))
    code = next(a for a in split["next_actions"] if a["kind"] == "quant_analysis")["code"]
    # qat.bc vs quantized.bc is bc vs bc: one run; the torch-vs-bc sensitivity run is split
    first, sens = code.split("qa_sens = QuantAnalysis(")
    assert "run_baseline_model" not in first and "qa.run()" in first
    assert sens.index("set_bad_case(pt_badcase)") < \
        sens.index("run(run_baseline_model=True, run_analysis_model=False)") < \
        sens.index("set_bad_case(badcase)") < \
        sens.index("run(run_baseline_model=False, run_analysis_model=True)")
    plain = triage_dict(_with(badcase="dataset_only"))
    code = next(a for a in plain["next_actions"] if a["kind"] == "quant_analysis")["code"]
    assert code.index("auto_find_bad_case(dataloader)") < code.index("qa.run()")
    assert "sensitivity()" in code and "sensitive()" not in code


def test_compile_stage_gives_checklist_not_quant_analysis():
    report = triage_dict(_with(stages={"quantized_bc": N, "hbm_x86": A, "board": A},
                               analyses_run=[{"type": "convert", "baseline": "qat_bc",
                                              "analysis": "quantized_bc"}]))
    kinds = [a["kind"] for a in report["next_actions"]]
    assert "quant_analysis" not in kinds and "checklist" in kinds and "hb_verifier" in kinds
    assert "deploy_adaptation" in _missing(report)
    assert "quantanalysis_for_deploy" in [p["id"] for p in report["pitfalls"]]
    assert {"ST080", "ST081"} <= {e["rule"] for e in report["conclusion"]["evidence"]}


@pytest.mark.parametrize("extra,pitfall", [
    (dict(analyses_run=[{"type": "export", "baseline": "qat", "analysis": "qat_bc"}]),
     "skipped_qat_export"),
    (dict(input_format_differs=True,
          analyses_run=[{"type": "convert", "baseline": "qat_export", "analysis": "quantized_bc",
                         "sensitivity": True}]), "input_format_mismatch"),
    (dict(consistency_level=2, retrain="yes"), "level2_first"),
    (dict(consistency_level=1, retrain="no"), "level_without_retrain"),
    (dict(analyses_run=[{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc"}]),
     "no_sensitivity"),
])
def test_pitfalls_seen_in_the_case(extra, pitfall):
    report = triage_dict(_with(**extra))
    ids = [p["id"] for p in report["pitfalls"]]
    assert pitfall in ids
    assert all(p["correct_practice"] for p in report["pitfalls"])


def test_separate_runs_clear_the_input_format_pitfall():
    report = triage_dict(_with(input_format_differs=True, analyses_run=[
        {"type": "convert", "baseline": "qat_export", "analysis": "quantized_bc",
         "sensitivity": True, "separate_runs": True}]))
    assert "input_format_mismatch" not in [p["id"] for p in report["pitfalls"]]


def test_artifacts_to_keep_report_presence(tmp_path):
    (tmp_path / "qa").mkdir()
    (tmp_path / "qa" / "compare_per_layer_out.txt").write_text("x")
    (tmp_path / "quantized.bc").write_text("x")
    report = triage_dict(CONVERT, folder=tmp_path)
    keep = {k["name"]: k for k in report["artifacts"]["keep"]}
    assert keep["quantized.bc"]["present"] and keep["quantized.bc"]["path"] == "quantized.bc"
    assert keep["compare_per_layer_out.{txt,csv}"]["path"] == "qa/compare_per_layer_out.txt"
    assert not keep["qat.bc"]["present"]


def test_every_conclusion_names_rules_and_facts():
    report = triage_dict(CONVERT)
    assert report["conclusion"]["evidence"][0]["rule"] == "ST050"
    trace = {t["rule"]: t for t in report["trace"]}
    assert trace["ST050"]["facts"][0]["type"] == "transition"
    assert "stages.quantized_bc" in trace["ST050"]["facts"][0]["source"]


def test_generated_code_reuses_the_users_analysis_folder():
    report = triage_dict(_with(analyses_run=[{"type": "convert", "baseline": "qat_bc",
                                              "analysis": "quantized_bc", "sensitivity": False,
                                              "out_dir": "qatbc_vs_quantizedbc"}]))
    action = next(a for a in report["next_actions"] if a["kind"] == "quant_analysis")
    # R5.7: its comparison is in the case, so its sensitivity step is next, beside it
    assert action["id"] == "qa_convert_sens"
    assert '"./qatbc_vs_quantizedbc"' in action["code"]
    assert 'out_dir="./qatbc_vs_quantizedbc_sens"' in action["code"]
    assert "./qa_convert" not in action["code"]


def test_an_analysis_already_run_with_sensitivity_is_not_proposed_again():
    report = triage_dict(_with(analyses_run=[{"type": "convert", "baseline": "qat_bc",
                                              "analysis": "quantized_bc", "sensitivity": True}]))
    assert not any(a["id"] == "qa_convert" for a in report["next_actions"])
    assert any(a["id"] == "bc_editor" for a in report["next_actions"])


def test_older_profiler_type_names_count_as_the_new_ones():
    # "quantized" is the older name of "convert": the run with sensitivity is already done
    report = triage_dict(_with(analyses_run=[{"type": "quantized", "baseline": "qat_bc",
                                              "analysis": "quantized_bc", "sensitivity": True}]))
    assert not any(a["id"] == "qa_convert" for a in report["next_actions"])
    run = next(f for f in report["facts"] if f["type"] == "analysis_run")
    assert run["analysis_model_type"] == "convert"
