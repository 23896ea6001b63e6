"""The edges of the sources the knowledge-row map reads: the profiler's input scale, the
platform a script or config names, the hb_compile normalisation and input size, and the
layout check in both directions (tests/test_knowledge_coverage.py holds the map)."""

from __future__ import annotations

import pytest

from .test_knowledge_coverage import build_case, triage


def facts_of(report: dict, kind: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == kind]


def compared(report: dict, item: str) -> dict:
    return next(f for f in facts_of(report, "deploy_compare") if f["item"] == item)


def status(report: dict, item: str) -> str:
    return next(c["status"] for c in report["checklist"] if c["id"] == item)


NO_TRAIN_SCALE = {"deploy": {"train": {"input_scale": None}}}


# --- the input QuantStub scale of the QuantAnalysis outputs ------------------------------

def test_the_statistic_table_gives_the_scale_when_there_is_no_compare_table(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": NO_TRAIN_SCALE,
        "profiler": {"analysis": "convert", "stub_scales": [0.00390625], "table": "statistic"}}))
    scale = compared(report, "input_scale")
    assert (scale["train"], scale["equal"]) == ("0.0039062", "no")     # 7 decimals, as printed
    assert "qa_convert/analysis_model/statistic.txt line" in scale["source"]
    assert status(report, "input_scale") == "fail"


def test_the_compare_table_row_is_cited(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": NO_TRAIN_SCALE,
        "profiler": {"analysis": "export", "stub_scales": [0.0078125]}}))
    scale = compared(report, "input_scale")
    assert scale["equal"] == "yes"
    assert scale["source"].startswith("qa_export/compare_per_layer_out.txt line ")
    assert {"file": "qa_export/compare_per_layer_out.txt"}.items() <= scale["locations"][0].items()


@pytest.mark.parametrize("profiler,why", [
    ({"analysis": "export", "stub_scales": [0.0078125, 0.0094101]}, "two inputs: which one?"),
    ({"analysis": "fake_quant", "stub_scales": [0.00390625]}, "a calibration model's scale"),
])
def test_scales_that_do_not_name_the_qat_input_scale_are_not_used(tmp_path, profiler, why):
    report = triage(build_case(tmp_path / "c", {"base": "compile", "case": NO_TRAIN_SCALE,
                                                 "profiler": profiler}))
    assert compared(report, "input_scale")["train"] == "unknown", why


def test_a_scale_printed_with_7_decimals_equals_the_exact_board_scale(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"train": {"input_scale": None},
                                               "board": {"input_scale": 0.00390625}}},
        "profiler": {"analysis": "export", "stub_scales": [0.00390625]}}))
    scale = compared(report, "input_scale")
    assert (scale["train"], scale["equal"]) == ("0.0039062", "yes")


def test_case_yaml_wins_over_the_profiler(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "profiler": {"analysis": "export", "stub_scales": [0.00390625]}}))
    scale = compared(report, "input_scale")
    assert scale["equal"] == "yes" and "deploy.train.input_scale" in scale["source"]


def test_a_case_without_a_board_scale_gets_no_deployment_facts_from_the_profiler(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "convert", "profiler": {"analysis": "export", "stub_scales": [0.0078125]}}))
    assert not facts_of(report, "deploy_compare")


# --- the platform a script or config names ------------------------------------------------

def test_a_platform_from_the_script_is_no_second_opinion_on_its_own_march(tmp_path):
    report = triage(build_case(tmp_path / "c", {"base": "compile", "case": {"platform": None},
                                                 "script": "compile_nash_m"}))
    [platform] = facts_of(report, "platform")
    assert not platform["known"]                  # convert says nash-e, compile nash-m
    [march] = facts_of(report, "march_check")
    assert (march["platform"], march["consistent"]) == ("unknown", "no")
    report = triage(build_case(tmp_path / "ok", {"base": "compile", "case": {"platform": None},
                                                  "script": "correct"}))
    [platform] = facts_of(report, "platform")
    assert (platform["march"], platform["chip"]) == ("nash-e", "J6E")
    assert platform["source"].startswith("deploy/compile_model.py line ")
    [march] = facts_of(report, "march_check")
    assert march["platform"] == "unknown" and march["consistent"] == "unknown"


def test_the_script_and_config_must_agree_to_name_the_platform(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "convert", "case": {"platform": None}, "script": "correct",
        "config": {"model_parameters": {"march": "nash-p"}}}))
    assert not facts_of(report, "platform")[0]["known"]
    assert "platform" in {m["id"] for m in report["missing"]}


def test_a_platform_in_case_yaml_is_never_replaced(tmp_path):
    report = triage(build_case(tmp_path / "c", {"base": "convert", "case": {"platform": {"chip": "J6M"}},
                                                 "script": "march_nash_p"}))
    assert facts_of(report, "platform")[0]["march"] == "nash-m"
    # ... and the script's other march is a user-side difference at convert
    assert report["conclusion"]["suspect"] == "inconsistent_inputs_between_stages"
    assert facts_of(report, "march_check")[0]["platform"] == "nash-m"


# --- hb_compile normalisation, input size and input types ---------------------------------

@pytest.mark.parametrize("values,board,equal", [
    ({"mean_value": "128", "scale_value": "0.0078125"}, "(x / 1 - [128]) / [128]", "no"),
    ({"mean_value": "123.675 116.28 103.53"}, "(x / 1 - [123.675, 116.28, 103.53]) / unknown",
     "unknown"),
])
def test_hb_compile_normalisation(tmp_path, values, board, equal):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"board": {"mean": None, "std": None}}},
        "config": {"input_parameters": values}}))
    norm = compared(report, "normalisation")
    assert (norm["board"], norm["equal"]) == (board, equal)
    assert "config.yaml" in norm["source"]


def test_the_script_normalisation_wins_over_the_config(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "script": "correct",
        "config": {"input_parameters": {"mean_value": "128", "std_value": "128"}}}))
    norm = compared(report, "normalisation")
    assert norm["equal"] == "yes" and "deploy/compile_model.py line" in norm["source"]


def test_a_resizer_input_size_is_not_the_nv12_size(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"board": {"height": None, "width": None}}},
        "config": {"input_parameters": {"input_type_rt": "nv12", "input_source": "resizer",
                                        "input_layout_train": "NCHW",
                                        "input_shape": "1x3x541x960"}}}))
    [size] = facts_of(report, "nv12_size")
    assert not size["known"] and status(report, "nv12_even_size") == "unknown"


def test_a_config_without_input_types_leaves_them_to_case_yaml(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"train": {"color": "yuv444"}, "board": {"color": "rgb"}}},
        "config": {"compiler_parameters": {"core_num": 1}}}))
    [types] = facts_of(report, "input_types")
    assert (types["train"], types["rt"]) == ("yuv444", "rgb")
    assert status(report, "input_type_pair") == "fail"


# --- the layout check in both directions ---------------------------------------------------

@pytest.mark.parametrize("script,expected", [("correct", "fail"), ("numpy_permutes", "pass")])
def test_an_nhwc_model_fed_nchw_data_needs_the_inverse_permutes(tmp_path, script, expected):
    """hbdk semantics: turning the model's NHWC input into an NCHW one is [0, 2, 3, 1]."""
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "script": script,
        "case": {"deploy": {"train": {"layout": "NHWC"},
                            "board": {"layout": "NCHW", "color": "rgb", "input_source": "ddr"}}}}))
    assert status(report, "layout") == expected
