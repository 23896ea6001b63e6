"""knowledge.md §5 end to end: stage results in case.yaml -> the report's stage."""

from __future__ import annotations

import pytest

from qcdoctor.collectors.case_facts import collect_facts
from qcdoctor.fact_types import STAGES
from tests.conftest import case_from, triage_dict

N, A = {"status": "normal"}, {"status": "abnormal"}


def _case(**stages) -> dict:
    return {"evidence": ["dataset_eval"], "badcase": "available", "stages": stages}


# (stage table, expected stage, expected suspect)  -- one row per table row of §5
ROWS = [
    (dict(float=N, calib=A), "calibration", "calibration_precision"),
    (dict(calib=N, qat=A), "qat_training", "qat_precision"),
    (dict(float=N, qat=A), "qat_training", "qat_precision"),
    (dict(qat=N, qat_export=A), "pre_export", "lut_fixed_point"),
    (dict(qat_export=N, qat_bc=A), "export", "hbir_export"),
    (dict(qat=N, qat_bc=A), "export", "pre_export_or_export"),
    (dict(qat_bc=N, quantized_bc=A), "convert", "convert_requantize"),
    (dict(quantized_bc=N, nv12_bc=A), "nv12_insertion", "nv12_preprocess"),
    (dict(quantized_bc=N, qdq_removed_bc=A), "qdq_removal", "io_quant_types"),
    (dict(nv12_bc=N, qdq_removed_bc=A), "qdq_removal", "io_quant_types"),
    (dict(quantized_bc=N, hbm_x86=A), "compile", "compile_config_or_input_adaptation"),
    (dict(qdq_removed_bc=N, hbm_x86=A), "compile", "compile_config_or_input_adaptation"),
    (dict(hbm_x86=N, board=A), "user_side", "board_integration"),
    (dict(quantized_bc=N, board=A), "compile", "compile_or_board_not_split"),
    (dict(qat=N, board=A), "undetermined", "wide_gap"),
    (dict(qat_bc=N, hbm_x86=A), "undetermined", "wide_gap"),
    (dict(qat=N, qat_bc=N, quantized_bc=N, board=N), "none", ""),
    # rev 2: "none" needs the board; normal early stages leave the problem's stage open
    (dict(qat=N, qat_bc=N, quantized_bc=N), "undetermined", "abnormal_stage_not_evaluated"),
    ({}, "undetermined", "no_stage_results"),
    (dict(qat=N), "undetermined", "abnormal_stage_not_evaluated"),
    (dict(quantized_bc=A), "undetermined", "no_reference_stage"),
    (dict(qat=N, qat_bc=A, quantized_bc=N), "undetermined", "evaluation_inconsistent"),
]


@pytest.mark.parametrize("stages,stage,suspect", ROWS,
                         ids=[f"{'-'.join(r[0]) or 'empty'}->{r[1]}" for r in ROWS])
def test_transition_table(stages, stage, suspect):
    c = triage_dict(_case(**stages))["conclusion"]
    assert (c["stage"], c["suspect"]) == (stage, suspect)
    assert c["determined"] == (stage != "undetermined")


def test_single_frame_overrides_a_clear_transition():
    data = _case(qat_bc=N, quantized_bc=A)
    data["evidence"] = ["single_frame"]
    report = triage_dict(data)
    assert report["conclusion"]["stage"] == "undetermined"
    assert [e["rule"] for e in report["conclusion"]["evidence"]] == ["ST140", "ST050"]
    assert [p["id"] for p in report["pitfalls"]] == ["single_frame_evidence"]


def test_failed_user_check_makes_it_user_side():
    data = _case(qat_bc=N, quantized_bc=A)
    data["user_checks"] = {"same_checkpoint": "no"}
    assert triage_dict(data)["conclusion"]["stage"] == "user_side"


def test_float_export_state_makes_it_user_side():
    data = _case(qat=N, qat_bc=A)
    data["fake_quant_state"] = "float"
    report = triage_dict(data)
    assert report["conclusion"]["stage"] == "user_side"
    assert "fake_quant_state" in [p["id"] for p in report["pitfalls"]]


def test_wide_gap_asks_for_the_bisection_point_in_preference_order():
    for stages, bisect in [(dict(qat=N, board=A), "quantized_bc"),
                           (dict(qat_export=N, quantized_bc=A), "qat_bc"),
                           (dict(float=N, qat_bc=A), "qat_export")]:
        actions = triage_dict(_case(**stages))["next_actions"]
        assert actions[0]["stage_to_evaluate"] == bisect, stages


# --- status derivation --------------------------------------------------------------

def _statuses(data: dict) -> dict:
    facts = collect_facts(case_from(data), environ={}, installed={})
    return {f["stage"]: f["status"] for f in facts if f["type"] == "stage"}


def test_statuses_from_metrics_with_absolute_tolerance():
    got = _statuses({"tolerance": {"abs": 0.005}, "stages": {
        "qat": {"metric": "mAP", "value": 0.452}, "qat_bc": {"metric": "mAP", "value": 0.448},
        "quantized_bc": {"metric": "mAP", "value": 0.440}}})
    assert (got["qat"], got["qat_bc"], got["quantized_bc"]) == ("normal", "normal", "abnormal")
    assert set(got) == set(STAGES)


def test_default_relative_tolerance_is_one_percent():
    got = _statuses({"stages": {"qat": {"value": 100.0}, "qat_bc": {"value": 99.1},
                                "quantized_bc": {"value": 97.9}}})
    assert (got["qat_bc"], got["quantized_bc"]) == ("normal", "abnormal")


def test_lower_is_better_metrics():
    got = _statuses({"higher_is_better": False, "tolerance": {"rel": 0.05}, "stages": {
        "qat": {"metric": "loss", "value": 1.0}, "qat_bc": {"metric": "loss", "value": 1.02},
        "quantized_bc": {"metric": "loss", "value": 1.2}}})
    assert (got["qat_bc"], got["quantized_bc"]) == ("normal", "abnormal")


def test_reference_is_the_nearest_earlier_normal_stage():
    # qat_bc is abnormal, so quantized_bc is compared with qat, not with qat_bc
    got = _statuses({"tolerance": {"abs": 0.01}, "stages": {
        "qat": {"value": 0.50}, "qat_bc": {"value": 0.40}, "quantized_bc": {"value": 0.495}}})
    assert (got["qat_bc"], got["quantized_bc"]) == ("abnormal", "normal")


def test_explicit_status_wins_and_different_metrics_are_not_compared():
    got = _statuses({"stages": {"qat": {"metric": "mAP", "value": 0.5},
                                "qat_bc": {"metric": "NDS", "value": 0.1},
                                "quantized_bc": {"metric": "mAP", "value": 0.1,
                                                 "status": "normal"}}})
    assert (got["qat_bc"], got["quantized_bc"]) == ("unknown", "normal")


def test_baseline_may_be_declared_abnormal():
    got = _statuses({"stages": {"float": {"value": 0.5, "status": "abnormal"},
                                "qat": {"value": 0.5}}})
    assert (got["float"], got["qat"]) == ("abnormal", "unknown")
