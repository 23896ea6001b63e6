"""When a sensitivity table means something (knowledge.md §16 R3.10) and which ops in it
are LUT ops (R3.11), read through whole diagnoses of case folders in the real formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.reading.thresholds import DEFAULT
from qcdoctor.collectors.sensitivity import (
    FIXED_POINT_STAGES,
    SensitivityRow,
    is_lut,
    quantized_baseline,
    readings,
    tail_size,
)
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render, render_output
from qcdoctor.fact_types import STAGES
from tests.diagnosis.one_voice import problems
from tests.qa.scenarios import CONV, LUT, case_yaml, cliff_rows, gradual_rows
from tests.qa.writers import layer, write_compare, write_sensitivity

CONVERT_RUN = {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
               "out_dir": "qa_convert", "sensitivity": True}
ORIGIN = "neck.fuse.relu"              # the cliff of cliff_rows()


def triage(folder: Path, lang: str = "en") -> dict:
    return triage_case(load_case(folder), lang=lang, environ={}, installed={}, cwd=folder)


def rules_of(report: dict) -> set[str]:
    return {f["rule"] for f in report["findings"]}


def fired(report: dict) -> set[str]:
    """Every rule that fired, findings and pitfalls alike."""
    return {t["rule"] for t in report["trace"]}


def facts_of(report: dict, ftype: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == ftype]


def rows(values, op_type=CONV, kind="activation"):
    """Sensitivity rows (op_name, sensitive_type, op_type, value, quant_dtype)."""
    return [(name, kind, op_type, value, "qint8") for name, value in values]


def flat_values(count=8):
    """Close values over many ops, then a tail at zero: flat, sound."""
    return [(f"decoder.layer{i}.linear", 0.1 - i * 0.003) for i in range(count)] + \
        [("z1", 0.0), ("z2", 0.0)]


def convert_case(root: Path, compare_rows, sens_rows, *, run=CONVERT_RUN, **extra) -> Path:
    case = root / "case"
    case_yaml(case, analyses_run=[run], **extra)
    write_compare(case / run["out_dir"], compare_rows)
    write_sensitivity(case / run["out_dir"], sens_rows)
    return case


# --- R3.10: the origin wins -------------------------------------------------------------

def test_a_clear_origin_wins_over_a_flat_sensitivity(tmp_path):
    case = convert_case(tmp_path, cliff_rows(), rows(flat_values()), platform={"chip": "J6E"})
    report = triage(case)
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["flat"] and summary["origin_layer"] == ORIGIN and summary["misses_origin"]
    assert "LY048" in rules_of(report)
    assert not {"LY042", "LY046", "LY043"} & rules_of(report)
    text = next(f["text"] for f in report["findings"] if f["rule"] == "LY048")
    assert f"`{ORIGIN}`" in text and f"{summary['spread']:.6g} times the fifth" in text


def test_without_a_clear_origin_flat_still_means_accumulation(tmp_path):
    # the same sensitivity beside a gradual curve: the flat-means-accumulation rules speak
    case = convert_case(tmp_path, gradual_rows(), rows(flat_values()), platform={"chip": "J6E"})
    report = triage(case)
    assert {"LY042", "LY046"} <= rules_of(report)
    assert "LY048" not in rules_of(report)
    assert facts_of(report, "sensitivity_summary")[0]["origin_layer"] == ""


def test_a_dominant_op_elsewhere_does_not_cover_the_origin(tmp_path):
    values = [("head.cls.3", 0.5), ("backbone.s1.conv", 0.05), ("head.cls.0", 0.04),
              ("backbone.s2.conv", 0.01), ("head.cls.1", 0.0), (ORIGIN, 0.0)]
    report = triage(convert_case(tmp_path, cliff_rows(), rows(values)))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["dominant"] and summary["against_origin"] and not summary["top_is_origin"]
    assert "LY048" in rules_of(report) and "LY041" not in rules_of(report)


def test_a_dominant_origin_agrees(tmp_path):
    values = [(ORIGIN, 0.42), ("head.cls.0", 0.05), ("backbone.s1.conv", 0.03),
              ("head.cls.1", 0.01), ("backbone.s2.conv", 0.004), ("backbone.s0.conv", 0.0)]
    report = triage(convert_case(tmp_path, cliff_rows(), rows(values)))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["top_is_origin"] and not summary["misses_origin"]
    assert "LY041" in rules_of(report) and "LY048" not in rules_of(report)


def test_a_raised_tail_beside_a_clear_origin_is_the_uncovered_fault(tmp_path):
    values = [(f"op{i}", 0.5 - i * 0.05) for i in range(10)]        # never reaches zero
    report = triage(convert_case(tmp_path, cliff_rows(), rows(values)))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert not summary["tail_near_zero"] and not summary["flat"] and not summary["dominant"]
    assert "LY048" in rules_of(report) and "LY043" not in rules_of(report)


def clean_rows():
    """A healthy model's per-layer table: every row in the clean band."""
    return [layer(f"block{i}.conv", 0.99999 - i * 2e-7, atol=0.004, qscale=0.01)
            for i in range(12)]


def noise_values():
    """Its sensitivity: tiny values, the top twice the next, the tail a tenth of the top
    (read as ratios alone: one op dominating and a tail far from zero)."""
    return [("block3.conv", 2.1e-4), ("block7.conv", 0.9e-4), ("block1.conv", 0.8e-4)] + \
        [(f"block{i}.conv", (6 - i * 0.3) * 1e-5) for i in (0, 2, 4, 5, 6, 8, 9, 10, 11)]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("own_folder", [True, False])
def test_sensitivity_beside_a_clean_comparison_is_not_read(tmp_path, lang, own_folder):
    """A healthy model: the per-layer table is clean, so its sensitivity ranks noise; no
    "one op dominates", no "the run may be unsound", whether the sensitivity lies in the
    comparison's folder or in a folder of its own."""
    if own_folder:
        case = convert_case(tmp_path, clean_rows(), rows(noise_values()),
                            platform={"chip": "J6E"})
    else:
        case = tmp_path / "case"
        case_yaml(case, platform={"chip": "J6E"}, analyses_run=[
            {**CONVERT_RUN, "sensitivity": False},
            {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
             "out_dir": "qa_convert_sens", "sensitivity": True}])
        write_compare(case / "qa_convert", clean_rows())
        write_sensitivity(case / "qa_convert_sens", rows(noise_values()))
    report = triage(case, lang)
    summary = facts_of(report, "sensitivity_summary")[0]
    # the ratios alone would read dominance and a raised tail
    assert summary["dominant"] and not summary["tail_near_zero"]
    assert summary["comparison_clean"] and not summary["usable"]
    found = rules_of(report)
    assert {"LY012", "LY113"} <= found
    assert not {"LY040", "LY041", "LY042", "LY043", "LY046", "LY048"} & found
    assert not problems(report), problems(report)
    for fmt in ("md", "html", "json", "sarif", "junit"):
        assert render_output(report, fmt).strip(), fmt


def test_a_sensitivity_beside_an_abnormal_comparison_is_still_read(tmp_path):
    values = [(ORIGIN, 0.42), ("head.cls.0", 0.05), ("backbone.s1.conv", 0.03),
              ("head.cls.1", 0.01), ("backbone.s2.conv", 0.004), ("backbone.s0.conv", 0.0)]
    report = triage(convert_case(tmp_path, cliff_rows(), rows(values)))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert not summary["comparison_clean"] and summary["usable"]
    assert "LY113" not in rules_of(report)


def test_the_convert_sensitivity_folder_is_read_against_the_compare_folder(tmp_path):
    # knowledge.md §6 rev 2: qa_convert compares qat.bc with quantized.bc, qa_convert_sens
    # holds the sensitivity of qat.export.pt against quantized.bc on the same bad case
    case = tmp_path / "case"
    case_yaml(case, analyses_run=[
        {**CONVERT_RUN, "sensitivity": False},
        {"type": "convert", "baseline": "qat_export", "analysis": "quantized_bc",
         "out_dir": "qa_convert_sens", "sensitivity": True}])
    write_compare(case / "qa_convert", cliff_rows())
    write_sensitivity(case / "qa_convert_sens", rows(flat_values()))
    report = triage(case)
    summary = facts_of(report, "sensitivity_summary")[0]
    assert (summary["analysis"], summary["origin_layer"]) == ("qa_convert_sens", ORIGIN)
    assert "LY048" in rules_of(report) and "LY042" not in rules_of(report)


# --- R3.10: a quantized baseline ----------------------------------------------------------

@pytest.mark.parametrize("stage", STAGES)
def test_only_fixed_point_baselines_count_as_quantized(stage):
    # knowledge.md §2: convert makes quantized.bc fixed point; every stage after it stays so
    fixed_from = STAGES.index("quantized_bc")
    assert quantized_baseline(stage) == (STAGES.index(stage) >= fixed_from)
    assert quantized_baseline("") is False


def test_a_sensitivity_against_a_quantized_baseline_is_not_used(tmp_path):
    run = {"type": "convert", "baseline": "quantized_bc", "analysis": "qdq_removed_bc",
           "out_dir": "qa_qdq", "sensitivity": True}
    values = [("attn.rsqrt", 0.9), ("conv1", 0.1), ("conv2", 0.09), ("conv3", 0.085),
              ("conv4", 0.08), ("conv5", 0.08)]
    sens = [(n, "activation", LUT if "rsqrt" in n else CONV, v, "qint8") for n, v in values]
    report = triage(convert_case(tmp_path, cliff_rows(), sens, run=run))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["baseline_quantized"] and not summary["usable"]
    assert summary["dominant"] and summary["lut_in_top"] and not summary["tail_near_zero"]
    fired = rules_of(report)
    assert "LY049" in fired
    assert not {"LY041", "LY042", "LY043", "LY045", "LY047", "LY048"} & fired
    assert "LY049" in render(report, "md")


def test_the_same_tables_against_a_fake_quant_baseline_are_read(tmp_path):
    run = {"type": "convert", "baseline": "qat_export", "analysis": "quantized_bc",
           "out_dir": "qa_convert", "sensitivity": True}
    values = [("head.bbox.conv", 0.9), ("conv1", 0.1), ("conv2", 0.05), ("conv3", 0.0),
              ("conv4", 0.0)]
    report = triage(convert_case(tmp_path, gradual_rows(), rows(values), run=run))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["usable"] and summary["baseline"] == "qat_export"
    assert "LY041" in rules_of(report) and "LY049" not in rules_of(report)


STATISTIC = (
    "+-------+------------+-----------+--------+---------+--------+---------+--------+\n"
    "| Index | Op Name    | Mod Name  | Attr   | Dtype   | Scale  | Min     | Max    |\n"
    "|-------+------------+-----------+--------+---------+--------+---------+--------|\n"
    "| 3     | qat.Conv2d | head.conv | weight | qint8   | 0.1    | -12.5   | 0.4    |\n"
    "+-------+------------+-----------+--------+---------+--------+---------+--------+\n")


@pytest.mark.parametrize("baseline, analysis, read", [("hbm_x86", "board", False),
                                                      ("qat_export", "quantized_bc", True)])
def test_a_weight_reading_needs_a_usable_sensitivity(tmp_path, baseline, analysis, read):
    run = {"type": "convert", "baseline": baseline, "analysis": analysis, "out_dir": "qa",
           "sensitivity": True}
    sens = [("head.conv", "weight", CONV, 0.7, "qint8"), ("a", "activation", CONV, 0.01, "qint8"),
            ("b", "activation", CONV, 0.0, "qint8")]
    case = convert_case(tmp_path, gradual_rows(), sens, run=run)
    (case / "qa" / "analysis_model").mkdir()
    (case / "qa" / "analysis_model" / "statistic.txt").write_text(STATISTIC, encoding="utf-8")
    report = triage(case)
    assert bool(facts_of(report, "weight_stat")) is read
    assert ("LY044" in rules_of(report)) is read


# --- R3.10: the tail itself ---------------------------------------------------------------

@pytest.mark.parametrize("count, share, size", [(4, 0.2, 1), (5, 0.2, 1), (9, 0.2, 1),
                                                (10, 0.2, 2), (13, 0.2, 2), (15, 0.2, 3),
                                                (100, 0.29, 29), (10, 0.25, 2), (6, 0.5, 3)])
def test_the_tail_is_the_lowest_share_rounded_down(count, share, size):
    assert tail_size(count, share) == size


def descending(values) -> np.ndarray:
    return np.array(sorted(values, reverse=True), dtype=float)


def ten_with_tail(tail: float) -> np.ndarray:
    """Ten values, top 1.0, whose lowest two (the tail at tail_share 0.2) are ``tail``."""
    return descending([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, tail, tail])


def test_a_tail_at_the_limit_is_near_zero_and_just_above_it_is_not():
    limit = DEFAULT.tail_near_zero
    assert readings(ten_with_tail(limit * 1.0))["tail_near_zero"] is True
    above = readings(ten_with_tail(limit * 1.01))
    assert above["tail_near_zero"] is False and above["tail_ratio"] == pytest.approx(limit * 1.01)


def test_only_the_lowest_share_is_the_tail():
    # the third-lowest value is large; the tail (lowest two) is at zero: sound
    values = descending([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.35, 0.0, 0.0])
    assert readings(values)["tail_near_zero"] is True
    # one more raised value enters the tail of two: its mean is above the limit
    raised = descending([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.35, 0.3, 0.0])
    assert readings(raised)["tail_near_zero"] is False


def test_too_few_values_or_a_zero_top_never_warn():
    assert readings(descending([1.0, 0.9, 0.9, 0.9]))["tail_near_zero"] is True
    assert readings(descending([1.0, 0.9, 0.9, 0.9, 0.9]))["tail_near_zero"] is False
    assert readings(np.zeros(8))["tail_near_zero"] is True


@pytest.mark.parametrize("factor, warns", [(1.0, False), (1.01, True)])
def test_the_tail_edge_through_a_whole_diagnosis(tmp_path, factor, warns):
    tail = DEFAULT.tail_near_zero * factor
    values = [(f"decoder.layer{i}.linear", 1.0 - i * 0.1) for i in range(8)] + \
        [("t1", tail), ("t2", tail)]
    report = triage(convert_case(tmp_path, gradual_rows(), rows(values)))
    assert facts_of(report, "sensitivity_summary")[0]["tail_near_zero"] is (not warns)
    assert ("LY043" in rules_of(report)) is warns


@pytest.mark.parametrize("tail_cosine, warns", [(0.9999, False), (0.9, True)])
def test_a_cosine_tail_is_read_as_one_minus_cosine(tmp_path, tail_cosine, warns):
    # Cosine: smaller is worse, the file lists the smallest first; top badness 1 - 0.5
    values = [(f"decoder.layer{i}.linear", 0.5 + i * 0.05) for i in range(8)] + \
        [("t1", tail_cosine), ("t2", tail_cosine)]
    case = tmp_path / "case"
    case_yaml(case, analyses_run=[CONVERT_RUN])
    write_compare(case / "qa_convert", gradual_rows())
    write_sensitivity(case / "qa_convert", rows(values), metric="Cosine")
    report = triage(case)
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["tail_ratio"] == pytest.approx((1 - tail_cosine) / 0.5, rel=1e-4)
    assert summary["tail_near_zero"] is (not warns)
    assert ("LY043" in rules_of(report)) is warns


# --- R3.10: a sensitivity the probe ran counts as run -------------------------------------

def probe_case(root: Path, *, sensitivity: bool) -> Path:
    torch = pytest.importorskip("torch")
    from qcdoctor.probe import compare_models
    from tests.probe_nets import quantize, toy
    example = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    baseline, qat = quantize(toy(), example)
    case = root / "case"
    # the entry lists the folder but does not repeat that sensitivity ran
    case_yaml(case, stages={"float": {"status": "normal"}, "calib": {"status": "abnormal"}},
              analyses_run=[{"type": "fake_quant", "baseline": "float", "analysis": "calib",
                             "out_dir": "qa_probe", "origin": "probe"}])
    compare_models(baseline, qat, example, case / "qa_probe", sensitivity=sensitivity)
    return case


def test_a_sensitivity_the_probe_ran_counts_as_run(tmp_path):
    report = triage(probe_case(tmp_path, sensitivity=True))
    assert facts_of(report, "qa_folder")[0]["sensitivity_ran"]
    assert facts_of(report, "analysis_run")[0]["sensitivity"]
    assert facts_of(report, "analysis_summary")[0]["with_sensitivity"]
    assert not {"LY090", "PF090"} & fired(report)
    assert "no_sensitivity" not in {p["id"] for p in report["pitfalls"]}
    assert "qa_fake_quant" not in {a["id"] for a in report["next_actions"]}
    assert "with sensitivity" in render(report, "md")


def test_a_probe_run_without_sensitivity_is_missing_it(tmp_path):
    report = triage(probe_case(tmp_path, sensitivity=False))
    assert not facts_of(report, "qa_folder")[0]["sensitivity_ran"]
    assert {"LY090", "PF090"} <= fired(report)
    assert "no_sensitivity" in {p["id"] for p in report["pitfalls"]}
    # R5.7: the probe's comparison is not proposed again; its sensitivity is, by the probe,
    # into a folder of its own
    ids = {a["id"]: a for a in report["next_actions"]}
    assert "qa_fake_quant" not in ids and "probe_sens:qa_probe" in ids
    code = ids["probe_sens:qa_probe"]["code"]
    assert "sensitivity=True" in code and '"./qa_probe_sens"' in code


def test_probe_tables_not_kept_are_named_not_asked_for_again(tmp_path):
    case = probe_case(tmp_path, sensitivity=True)
    removed = sorted(p.name for p in (case / "qa_probe").glob("output_*_sensitive_ops.*"))
    for name in removed:
        (case / "qa_probe" / name).unlink()
    report = triage(case)
    assert "LY090" not in rules_of(report)
    problem = next(p for p in facts_of(report, "artifact_problem")
                   if p["file"] == "qa_probe/probe_run.yaml")
    assert problem["partial"] and all(name in problem["problem"] for name in removed)


# --- R3.11: LUT ops -----------------------------------------------------------------------

def row(op_type: str, name: str) -> SensitivityRow:
    return SensitivityRow(name, "activation", f"<class '{op_type}'>", 0.5, "qint16", 3)


@pytest.mark.parametrize("op_type, name", [
    ("torch.nn.modules.activation.SiLU", "backbone.stage1.act"),
    ("torch.nn.modules.activation.GELU", "blocks.0.mlp.1"),
    ("torch.nn.modules.activation.Softmax", "attn.probs"),
    ("torch.Tensor.softmax", "blocks.1.attn.softmax_0"),
    ("torch.nn.modules.activation.Mish", "neck.m"),
    ("horizon_plugin_pytorch.nn.qat.segment_lut.SegmentLUT", "model.map_head.sparse_head.sigmoid"),
    # a generic type: the name decides, by whole tokens
    ("horizon_plugin_pytorch.nn.qat.functional_modules.FloatFunctional", "head.exp"),
])
def test_lut_ops_are_recognised(op_type, name):
    assert is_lut(row(op_type, name))


@pytest.mark.parametrize("op_type, name", [
    ("horizon_plugin_pytorch.nn.qat.conv2d.Conv2d", "head.exp_conv"),
    ("torch.nn.modules.conv.Conv2d", "pos.sin_embed"),
    ("horizon_plugin_pytorch.nn.qat.stubs.QuantStub",
     "model.map_head.sparse_head.decoder.gen_sineembed_for_position0.dim_t_quant"),
    ("horizon_plugin_pytorch.nn.qat.functional_modules.FloatFunctional", "head.expand"),
])
def test_ops_that_are_no_lut_are_not(op_type, name):
    assert not is_lut(row(op_type, name))


def pre_export_case(root: Path, top_type: str, top_name: str) -> Path:
    case = root / "case"
    run = {"type": "pre_export", "baseline": "qat", "analysis": "qat_export",
           "out_dir": "qa_pre_export", "sensitivity": True}
    case_yaml(case, stages={"qat": {"status": "normal"}, "qat_export": {"status": "abnormal"}},
              analyses_run=[run])
    write_compare(case / "qa_pre_export", gradual_rows())
    values = [(top_name, top_type, 0.9)] + [(f"conv{i}", CONV, 0.1 - i * 0.01) for i in range(6)]
    # as some profiler versions write it: no flops column
    write_sensitivity(case / "qa_pre_export",
                      [(n, "activation", t, v, "qint16") for n, t, v in values], flops=False)
    return case


def test_a_silu_module_is_a_lut_op_at_pre_export(tmp_path):
    report = triage(pre_export_case(tmp_path, "torch.nn.modules.activation.SiLU",
                                    "backbone.stage1.act"))
    summary = facts_of(report, "sensitivity_summary")[0]
    assert summary["lut_in_top"] and summary["lut_ops"] == "backbone.stage1.act"
    assert "LY040" in rules_of(report)
    bisect = next(a for a in report["next_actions"] if a["kind"] == "lut_bisect")
    assert '"backbone.stage1.act"' in bisect["code"]


def test_a_conv_named_exp_is_no_lut_op(tmp_path):
    report = triage(pre_export_case(tmp_path, "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d",
                                    "head.exp_conv"))
    assert not facts_of(report, "sensitivity_summary")[0]["lut_in_top"]
    assert "LY040" not in rules_of(report)


def test_fixed_point_stages_follow_the_chain():
    assert set(FIXED_POINT_STAGES) == set(STAGES[STAGES.index("quantized_bc"):])


def test_the_probes_pending_sensitivity_once_run_beside_it_is_no_longer_asked(tmp_path):
    """R5.7 with R4.7: the step AN047 proposes (the probe again, with its sensitivity, into
    qa_probe_sens) counts as the comparison's sensitivity once it is in the case: neither
    it nor the comparison is proposed again."""
    torch = pytest.importorskip("torch")
    from qcdoctor.probe import compare_models
    from tests.probe_nets import quantize, toy
    case = probe_case(tmp_path, sensitivity=False)
    example = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    baseline, qat = quantize(toy(), example)
    compare_models(baseline, qat, example, case / "qa_probe_sens", sensitivity=True,
                   stages=("float", "calib"))
    report = triage(case)
    ids = {a["id"] for a in report["next_actions"]}
    assert not {"qa_fake_quant", "probe_sens:qa_probe", "probe_sens:qa_probe_sens"} & ids
    assert facts_of(report, "analysis_summary")[0]["with_sensitivity"]
