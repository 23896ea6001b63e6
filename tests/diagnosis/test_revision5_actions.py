"""knowledge.md §18 R5.7 and R5.11, as a user meets them, in both languages: a comparison
the case already holds is never proposed again (its pending sensitivity step is), every
QuantAnalysis run costs "analyse"; with x86 normal and the board abnormal the headline and
the first actions are board integration, never a compile setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.reports.formats import render_output
from tests.qa.writers import layer, write_compare

CONVERT_CASE = """symptom: mAP drops after convert
evidence: [dataset_eval]
badcase: available
platform: {chip: J6E}
versions: {horizon-plugin-pytorch: 3.2.1, horizon-plugin-profiler: 3.2.1, hbdk4-compiler: 4.6.0}
stages:
  qat_bc: {metric: mAP, value: 0.449}
  quantized_bc: {metric: mAP, value: 0.391}
analyses_run: [{type: convert, baseline: qat_bc, analysis: quantized_bc, out_dir: qa_convert}]
"""


def _convert_case(tmp_path: Path) -> Path:
    case = tmp_path / "case"
    write_compare(case / "qa_convert", [layer("a", 0.9999), layer("b", 0.9998),
                                        layer("c", 0.6), layer("d", 0.58)])
    (case / "case.yaml").write_text(CONVERT_CASE, encoding="utf-8")
    return case


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_comparison_in_the_case_is_not_proposed_again(tmp_path, lang):
    case = _convert_case(tmp_path)
    report = triage_path(case, use_env=False, lang=lang)
    ids = [a["id"] for a in report["next_actions"]]
    assert "qa_convert" not in ids and "qa_convert_sens" in ids, ids
    pending = next(a for a in report["next_actions"] if a["id"] == "qa_convert_sens")
    assert pending["cost"] == "analyse"
    # its code runs the sensitivity alone, never the per-layer comparison again
    assert "sensitivity()" in pending["code"] and "compare_per_layer" not in pending["code"]
    assert "QuantAnalysis(qat_bc" not in pending["code"]
    for fmt in ("md", "html", "json", "sarif", "junit"):
        assert render_output(report, fmt)


def test_every_quant_analysis_run_costs_analyse():
    costs = {(r.id, r.then["next_action"].get("cost")) for r in load_rules()
             if (r.then.get("next_action") or {}).get("kind") == "quant_analysis"}
    assert costs and {cost for _, cost in costs} == {"analyse"}, sorted(costs)


BOARD_CASE = """symptom: board output wrong
evidence: [dataset_eval]
badcase: available
platform: {chip: J6E}
stages:
  quantized_bc: {status: normal}
  hbm_x86: {status: %s}
  board: {status: abnormal}
deploy:
  config: hb_compile.yaml
"""


def _board_case(tmp_path: Path, x86: str) -> Path:
    case = tmp_path / x86
    case.mkdir()
    (case / "case.yaml").write_text(BOARD_CASE % x86, encoding="utf-8")
    (case / "hb_compile.yaml").write_text("model_parameters:\n  march: nash-e\n"
                                          "compiler_parameters:\n  core_num: 4\n",
                                          encoding="utf-8")
    return case


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_x86_normal_board_abnormal_is_board_integration_whatever_core_num_says(tmp_path, lang):
    report = triage_path(_board_case(tmp_path, "normal"), use_env=False, lang=lang)
    assert (report["conclusion"]["stage"], report["conclusion"]["suspect"]) == \
        ("user_side", "board_integration")
    first = [a["id"] for a in report["next_actions"][:2]]
    assert "fix_check:core_num" not in first
    fired = [e["rule"] for e in report["conclusion"]["evidence"] if not e["overridden"]]
    assert "ST150" not in fired and "ST090" in fired and "DP090" not in fired
    # a compile setting is not judged where it cannot explain the gap
    core_num = next(c for c in report["checklist"] if c["id"] == "core_num")
    assert core_num["status"] == "not_applicable"


def test_x86_abnormal_too_reads_the_compile_setting(tmp_path):
    report = triage_path(_board_case(tmp_path, "abnormal"), use_env=False, lang="en")
    assert report["conclusion"]["suspect"] == "core_num"
    assert report["next_actions"][0]["id"] == "fix_check:core_num"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_post_processing_in_the_model_with_a_raised_tail_says_the_run_is_unsound(tmp_path,
                                                                                  lang):
    """§8: a sensitivity tail far from zero is said whatever the folder speaks for, with the
    post-processing the case declares as its likely cause; the redo without it carries its
    analysis type."""
    from tests.qa.writers import write_sensitivity
    case = _convert_case(tmp_path)
    conv = "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d"
    write_sensitivity(case / "qa_convert", [(f"op{i}", "activation", conv, 0.9 - 0.01 * i,
                                             "qint8") for i in range(12)])
    text = (case / "case.yaml").read_text(encoding="utf-8")
    (case / "case.yaml").write_text(text + "postprocess_in_model: 'yes'\n", encoding="utf-8")
    report = triage_path(case, use_env=False, lang=lang)
    fired = {t["rule"] for t in report["trace"]}
    assert {"LY027", "LY085"} <= fired, sorted(fired)
    redo = next(a for a in report["next_actions"] if a["id"].startswith("compare_without"))
    assert redo["analysis_model_type"] == "convert" and redo["cost"] == "analyse"


def _declining(folder: Path, count: int = 20) -> None:
    """Cosine falling steadily from 1.0 to 0.996, a few quantization steps a row."""
    write_compare(folder, [layer(f"l{i}", 1.0 - 0.004 * i / (count - 1), atol=0.001 * (1 + i / 10),
                                 qscale=0.01) for i in range(count)])


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("stage, pair, cost", [
    ("convert", "qat_bc: {metric: mAP, value: 0.449}\n  quantized_bc: {metric: mAP, value: 0.391}",
     "retrain"),
    ("calibration", "float: {metric: mAP, value: 0.60}\n  calib: {metric: mAP, value: 0.50}",
     "recalibrate"),
])
def test_a_steady_decline_below_the_cited_threshold_is_accumulation_with_its_remedy(
        tmp_path, lang, stage, pair, cost):
    """R5.6: eleven rows below the 0.999 the report cites are no quantization noise."""
    case = tmp_path / "case"
    kind, baseline, analysis = {"convert": ("convert", "qat_bc", "quantized_bc"),
                                "calibration": ("fake_quant", "float", "calib")}[stage]
    _declining(case / "qa")
    (case / "case.yaml").write_text(
        f"symptom: mAP drops\nevidence: [dataset_eval]\nbadcase: available\n"
        f"platform: {{chip: J6E}}\nstages:\n  {pair}\n"
        f"analyses_run: [{{type: {kind}, baseline: {baseline}, analysis: {analysis}, "
        f"out_dir: qa}}]\n", encoding="utf-8")
    report = triage_path(case, use_env=False, lang=lang)
    assert report["conclusion"]["stage"] == stage
    fired = {t["rule"] for t in report["trace"]}
    assert "LY022" not in fired and "LY012" not in fired and "LY011" in fired, sorted(fired)
    remedy = next(a for a in report["next_actions"] if a["id"].startswith("qint16:"))
    assert remedy["cost"] == cost
    # R3.14: its code's comment says what the finding says (accumulation, not rounding)
    first = remedy["code"].splitlines()[0]
    assert ("accumulates" in first or "累积" in first) and "rounding" not in first, first


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_control_from_tables_alone_reads_as_noise_with_no_remedy(tmp_path, lang):
    """R5.6: a stage against itself (declared in analyses_run) is a control."""
    case = tmp_path / "case"
    _declining(case / "qa_control")
    (case / "case.yaml").write_text(
        "symptom: mAP drops after calibration\nevidence: [dataset_eval]\nbadcase: available\n"
        "platform: {chip: J6E}\nstages:\n  float: {metric: mAP, value: 0.60}\n"
        "  calib: {metric: mAP, value: 0.50}\n"
        "analyses_run: [{type: fake_quant, baseline: calib, analysis: calib, "
        "out_dir: qa_control}]\n", encoding="utf-8")
    report = triage_path(case, use_env=False, lang=lang)
    (folder,) = [f for f in report["facts"] if f["type"] == "qa_folder"]
    assert folder["scope"] == "control"
    fired = {t["rule"] for t in report["trace"]}
    assert "LY086" in fired
    assert not [a for a in report["next_actions"]
                if a["kind"] == "lut_bisect" or a["id"].startswith(("qint16:", "fixed_scale:"))]
