"""QuantAnalysis outputs: every format variant, the readings, findings and next actions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qcdoctor.collectors.advisor import classify
from qcdoctor.collectors.case_facts import collect_facts
from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.diagnosis.triage import triage_case
from tests.paths import TESTS
from tests.qa.scenarios import SCENARIOS, build, case_yaml, cliff_rows
from tests.qa.writers import (
    COMPARE_FORMATS,
    layer,
    write_compare,
    write_fx_graph,
    write_model_check,
    write_sensitivity,
)

GOLDEN = TESTS / "golden" / "qa"
UPDATE = os.environ.get("QCDOCTOR_UPDATE_GOLDEN") == "1"


def triage(folder: Path, lang: str = "en", **kw) -> dict:
    return triage_case(load_case(folder), lang=lang, environ={}, installed={}, cwd=folder, **kw)


def facts_of(report: dict, ftype: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == ftype]


def rules_of(report: dict) -> set[str]:
    return {f["rule"] for f in report["findings"]}


# scenario -> (origin layer, pattern, error kind (None: accumulation names no source),
# finding rules that must appear, must not). The cliff rows' origin has Atol 46
# quantization steps with the qint8 range covering the baseline: the op's conversion
EXPECT = {
    "cliff": ("neck.fuse.relu", "cliff", "conversion", {"LY010", "LY041", "LY033"},
              {"LY011", "LY042", "LY031"}),
    "gradual": ("decoder.layer1.linear", "gradual", None, {"LY011", "LY020"},
                {"LY010", "LY031"}),
    "truncation": ("head.reciprocal", "cliff", "truncation", {"LY010", "LY030", "LY054", "LY041"},
                   {"LY031", "LY034", "LY035"}),
    "rounding": ("head.bbox.conv", "cliff", "rounding", {"LY010", "LY031"}, {"LY030", "LY033"}),
    # a convert case: the LUTs are fixed-pointed already, so no quantized_forward bisection
    "lut": ("neck.fuse.relu", "cliff", "conversion", {"LY045"}, {"LY040"}),
    "flat": ("decoder.layer1.linear", "gradual", None, {"LY011", "LY042"}, {"LY041"}),
    "broken_run": ("neck.fuse.relu", "cliff", "conversion", {"LY048", "LY060"}, {"LY042", "LY043"}),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_findings(tmp_path, scenario):
    report = triage(build(scenario, tmp_path))
    origin_layer, pattern, kind, must, must_not = EXPECT[scenario]
    origin = facts_of(report, "layer_origin")[0]
    assert (origin["layer"], origin["pattern"]) == (origin_layer, pattern)
    assert [f["kind"] for f in facts_of(report, "error_kind")] == ([kind] if kind else [])
    assert must <= rules_of(report), rules_of(report)
    assert not (must_not & rules_of(report))
    for finding in report["findings"]:
        sources = [f.get("source", "") for f in finding["evidence"].values()]
        assert any(sources), f"{finding['rule']} cites no file"
    _golden(scenario, report)


def _golden(name: str, report: dict) -> None:
    text = json.dumps([{"rule": f["rule"], "text": f["text"],
                        "sources": [e.get("source") for e in f["evidence"].values()]}
                       for f in report["findings"]], ensure_ascii=False, indent=2) + "\n"
    path = GOLDEN / f"{name}.findings.json"
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        assert UPDATE, f"golden {path.name} was missing and has been written; re-run"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("layout", ["16", "23", "upper"])
@pytest.mark.parametrize("fmt", COMPARE_FORMATS)
def test_every_layout_and_format_reads_the_same(tmp_path, layout, fmt):
    report = triage(build("truncation", tmp_path, layout, fmt))
    origin = facts_of(report, "layer_origin")[0]
    assert origin["layer"] == "head.reciprocal" and origin["row"] == 4
    assert origin["dtype"] == "qint8" and origin["qscale"] == pytest.approx(0.05)
    table = facts_of(report, "layer_table")[0]
    assert table["layout"] == layout and table["compared"] == 8 and not table["partial"]
    assert facts_of(report, "error_kind")[0]["kind"] == "truncation"
    assert f"compare_per_layer_out.{fmt[:3]} row 4" in origin["source"]


def test_next_actions_name_the_real_ops(tmp_path):
    report = triage(build("truncation", tmp_path))
    fixed = next(a for a in report["next_actions"] if a["id"] == "fixed_scale:head.reciprocal")
    assert '"head.reciprocal": {"threshold": threshold}' in fixed["code"]
    assert "threshold = 130 " in fixed["code"]          # the baseline |max| of the layer
    lut_case = build("lut", tmp_path / "b")
    assert not any(a["kind"] == "lut_bisect" for a in triage(lut_case)["next_actions"])
    # the same sensitive LUT ops at pre_export: bisect them by name
    case_yaml(lut_case, stages={"qat": {"status": "normal"}, "qat_export": {"status": "abnormal"}},
              analyses_run=[{"type": "pre_export", "baseline": "qat", "analysis": "qat_export",
                             "out_dir": "qa_convert", "sensitivity": True}])
    lut = triage(lut_case)
    bisect = next(a for a in lut["next_actions"] if a["kind"] == "lut_bisect"
                  and a["id"].startswith("lut_bisect:"))
    assert '"attn.rsqrt",' in bisect["code"] and '"pos.exp",' in bisect["code"]
    rounding = triage(build("rounding", tmp_path / "c"))
    q16 = next(a for a in rounding["next_actions"] if a["id"] == "qint16:head.bbox.conv")
    assert '"head.bbox.conv": qint16' in q16["code"] and "reference_qconfig=get_qconfig()" in q16["code"]


def test_report_sections_show_the_qa_summary(tmp_path):
    folder = build("truncation", tmp_path)
    report = triage(folder, lang="zh")
    from qcdoctor.engine.reports.formats import render
    md = render(report, "md")
    key = md[md.index("## 关键发现"):md.index("## 下一步建议")]
    assert "误差起点 `head.reciprocal`" in key and "误差来源：截断" in key
    assert "qa_convert/compare_per_layer_out.txt 数据第 4 行" in key and "判定阈值" in key
    assert report["thresholds"]["cosine_good"] == 0.999
    compile_case = tmp_path / "compile"
    case_yaml(compile_case, stages={"quantized_bc": {"status": "normal"},
                                    "hbm_x86": {"status": "abnormal"}})
    write_compare(compile_case / "qa_convert", cliff_rows())
    compile_report = triage(compile_case, lang="zh")
    assert "不适用" in render(compile_report, "md")
    assert "quantanalysis_for_deploy" in {p["id"] for p in compile_report["pitfalls"]}


def test_no_sensitivity_is_a_pitfall_and_the_worst_layer_a_caution(tmp_path):
    case = tmp_path / "c"
    case_yaml(case)
    write_compare(case / "qa_convert", [layer(f"l{i}", 0.9999 - i * 0.002) for i in range(10)])
    report = triage(case)
    # running compare without sensitivity is what the user did; taking the worst row
    # for the cause is only what the tables invite (R3.14)
    assert "no_sensitivity" in {p["id"] for p in report["pitfalls"]}
    assert "worst_layer_as_root" not in {p["id"] for p in report["pitfalls"]}
    assert "worst_layer_as_root" in {c["id"] for c in report["cautions"]}


def test_comparison_from_analyses_run_content_or_ask(tmp_path):
    named = tmp_path / "named"
    case_yaml(named, analyses_run=[{"type": "hbir", "baseline": "qat_export", "analysis": "qat_bc",
                                    "out_dir": "./mine"}])
    write_compare(named / "mine", cliff_rows())
    folder = facts_of(triage(named), "qa_folder")[0]
    assert (folder["comparison"], folder["known_from"], folder["baseline"]) == \
        ("export", "analyses_run", "qat_export")

    content = tmp_path / "content"
    case_yaml(content)
    rows = [dict(layer(f"l{i}", 0.9999), base_op_type="hbir.conv [hbir.conv2d]",
                 analy_op_type="hbir.qconv [hbir.conv2d]") for i in range(3)]
    write_compare(content / "horizon_quant_analysis", rows)
    assert facts_of(triage(content), "qa_folder")[0]["known_from"] == "content"

    unknown = tmp_path / "unknown"
    case_yaml(unknown)
    qat = "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d"
    write_compare(unknown / "horizon_quant_analysis", [layer("l0", 0.9, op=qat), layer("l1", 0.8, op=qat)])
    report = triage(unknown)
    assert "LY091" in rules_of(report)
    assert any(a["id"] == "name_comparison:horizon_quant_analysis" for a in report["next_actions"])


def test_the_origin_follows_the_data_flow_of_fx_graph(tmp_path):
    case = tmp_path / "g"
    case_yaml(case)
    # execution order interleaves two branches; branch_b.conv is bad with good producers,
    # branch_a.add comes first in row order but only because it consumes branch_b's output
    rows = [layer("quant", 0.99999), layer("branch_a.conv", 0.99998), layer("branch_a.add", 0.95),
            layer("branch_b.conv", 0.90), layer("head", 0.85)]
    write_compare(case / "qa_convert", rows)
    write_fx_graph(case / "fx_graph.txt", [
        ("placeholder", "input_0", "input_0", "()"),
        ("call_module", "quant", "quant", "(input_0,)"),
        ("call_module", "branch_b_conv", "branch_b.conv", "(quant,)"),
        ("call_module", "branch_a_conv", "branch_a.conv", "(quant,)"),
        ("get_attr", "branch_a_add", "branch_a.add", "()"),
        ("call_method", "add", "add", "(branch_a_add, branch_a_conv, branch_b_conv)"),
        ("call_module", "head", "head", "(add,)"),
        ("output", "output", "output", "(head,)")])
    report = triage(case)
    origin = facts_of(report, "layer_origin")[0]
    assert (origin["layer"], origin["pattern"], origin["reading"]) == \
        ("branch_b.conv", "cliff", "graph")
    assert origin["inputs"] == "quant" and "LY025" not in rules_of(report)
    # without the graph: read in row order, and the report says so
    (case / "fx_graph.txt").unlink()
    report = triage(case)
    origin = facts_of(report, "layer_origin")[0]
    assert origin["reading"] == "row_order" and "LY025" in rules_of(report)


def test_model_check_findings(tmp_path):
    case = tmp_path / "m"
    case_yaml(case, stages={"qat": {"status": "normal"}, "qat_bc": {"status": "abnormal"}})
    write_model_check(case / "model_check_result.txt", unfused=["view.proj.0(shared)"],
                      called=[("head.deploy_branch", 0), ("pos.div.reciprocal", 8)],
                      dequant_qint8=["dequant"], averaging=[("mod1.0", 0)])
    report = triage(case)
    kinds = {f["kind"] for f in facts_of(report, "model_check")}
    assert kinds == {"unfused", "called_zero", "shared", "dequant_low_precision",
                     "averaging_constant"}
    assert {"LY070", "LY071", "LY072", "LY073", "LY074"} <= rules_of(report)


@pytest.mark.parametrize("text,kind", [
    ("Total data range 130925.09375 maybe too large for quantization.", "range_too_large_any"),
    ("Current scale does not cover the data range", "scale_not_cover"),
    ("The output has inf or nan", "inf_nan"),
    ("data range too large for int8, try qint16", "range_too_large_int8"),
    ("input is asymmetric about 0", "asymmetric_input"),
    ("model output is not high precision", "output_not_high_precision"),
    ("input range is large, use int16", "large_input_range"),
    ("something new", "other"),
])
def test_advisor_messages_are_classified(text, kind):
    assert classify(text) == kind


@pytest.mark.parametrize("name,output,case,metric", [
    ("output_pred_boxes_L1_sensitive_ops.txt", "pred_boxes", "", "L1"),
    ("output_0_case_2_ATOL_sensitive_ops.txt", "0", "2", "ATOL"),
    ("output_logits_Cosine_sensitive_ops.txt", "logits", "", "Cosine"),
    ("output_x_SQNR_sensitive_ops.txt", "x", "", "SQNR"),
])
def test_sensitivity_file_names(name, output, case, metric):
    from qcdoctor.collectors.sensitivity import parse_name
    assert parse_name(Path(name)) == (output, case, metric)


def test_sensitivity_ascending_metrics_and_no_flops(tmp_path):
    case = tmp_path / "s"
    case_yaml(case)
    write_sensitivity(case / "qa", [("a", "activation", "x.Conv2d", 0.999, "qint8"),
                                    ("b", "activation", "x.Conv2d", 0.70, "qint8"),
                                    ("c", "activation", "x.Conv2d", 0.998, "qint8")],
                      metric="Cosine", flops=False, case=1)
    summary = facts_of(triage(case), "sensitivity_summary")[0]
    assert summary["top_op"] == "b" and summary["dominant"]


def test_sensitivity_pt_files_load_safely(tmp_path):
    pytest.importorskip("torch")
    case = tmp_path / "pt"
    case_yaml(case)
    write_sensitivity(case / "qa", [("head.rsqrt", "activation", "SegmentLUT", 0.5, "qint16"),
                                    ("conv", "activation", "Conv2d", 0.01, "qint8")], fmt="pt")
    summary = facts_of(triage(case), "sensitivity_summary")[0]
    assert summary["top_op"] == "head.rsqrt" and summary["lut_in_top"]


class Custom:
    def __init__(self):
        self.rows = [("a", "activation", "Conv2d", 0.5, "qint8")]


def test_pickled_objects_are_refused_unless_trusted(tmp_path):
    torch = pytest.importorskip("torch")
    case = tmp_path / "unsafe"
    case_yaml(case)
    (case / "qa").mkdir()
    torch.save([("a", "activation", Custom(), 0.5, "qint8")],
               case / "qa" / "output_y_L1_sensitive_ops.pt")
    report = triage(case)
    problem = facts_of(report, "artifact_problem")[0]
    assert "--trust-pickles" in problem["problem"] and not facts_of(report, "sensitivity_summary")
    trusted = triage(case, trust_pickles=True)
    assert facts_of(trusted, "sensitivity_summary")[0]["top_op"] == "a"


def test_truncated_pt_file_is_a_clear_problem(tmp_path):
    torch = pytest.importorskip("torch")
    case = tmp_path / "trunc"
    case_yaml(case)
    path = write_sensitivity(case / "qa", [("a", "activation", "Conv2d", 0.5, "qint8")], fmt="pt")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert torch is not None
    problem = facts_of(triage(case), "artifact_problem")[0]
    assert "truncated" in problem["problem"] or "cannot read" in problem["problem"]


def test_collect_gives_the_facts_triage_reasons_on(tmp_path):
    folder = build("cliff", tmp_path)
    facts = collect_facts(load_case(folder), environ={}, installed={}, cwd=folder)
    report = triage(folder)
    derived = [f for f in report["facts"] if f["type"] == "conclusion"]
    assert [f for f in report["facts"] if f["type"] != "conclusion"] == facts
    assert len(derived) == 1 and any(f["type"] == "layer_origin" for f in facts)


@pytest.mark.parametrize("form", ["dict", "tuple"])
def test_all_badcase_info_pt_in_both_generations(tmp_path, form):
    torch = pytest.importorskip("torch")
    case = tmp_path / form
    case_yaml(case)
    qa = case / "qa_convert"
    write_compare(qa, cliff_rows())
    worst = {"pred_boxes": {"L1": 3, "Cosine": 3}, "pred_logits": {"L1": 17, "Cosine": 3}}
    data = {"index_table": [[0, 1]], "worst_index": worst} if form == "dict" else \
        ([[0, 1]], worst, {"img": torch.zeros(1)})
    torch.save(data, qa / "all_badcase_info.pt")
    spread = facts_of(triage(case), "badcase_spread")[0]
    assert spread["spread"] and spread["distinct_indices"] == 2


def test_weight_sensitivity_reads_statistic(tmp_path):
    case = tmp_path / "w"
    case_yaml(case)
    qa = case / "qa_convert"
    write_compare(qa, cliff_rows())
    write_sensitivity(qa, [("head.conv", "weight", "x.Conv2d", 0.7, "qint8"),
                           ("a", "activation", "x.Conv2d", 0.01, "qint8"),
                           ("b", "activation", "x.Conv2d", 0.0, "qint8")])
    (qa / "analysis_model").mkdir()
    (qa / "analysis_model" / "statistic.txt").write_text(
        "+-------+------------+-----------+--------+---------+--------+---------+--------+\n"
        "| Index | Op Name    | Mod Name  | Attr   | Dtype   | Scale  | Min     | Max    |\n"
        "|-------+------------+-----------+--------+---------+--------+---------+--------|\n"
        "| 3     | qat.Conv2d | head.conv | weight | qint8   | 0.1    | -12.5   | 0.4    |\n"
        "| 3     | qat.Conv2d | head.conv | output | qint8   | 0.1    | -1.0    | 1.0    |\n"
        "+-------+------------+-----------+--------+---------+--------+---------+--------+\n")
    report = triage(case)
    stat = facts_of(report, "weight_stat")[0]
    assert (stat["module"], stat["min"], stat["max"]) == ("head.conv", -12.5, 0.4)
    assert "LY044" in rules_of(report)


def test_advisor_csv(tmp_path):
    case = tmp_path / "a"
    case_yaml(case)
    (case / "qa").mkdir()
    (case / "qa" / "abnormal_layer_advisor.csv").write_text(
        "mod_name, op_type, abnormal_info, advice\n"
        "head.exp, Exp, Current scale does not cover the data range, check fake quant\n")
    message = facts_of(triage(case), "advisor_message")[0]
    assert (message["layer"], message["kind"]) == ("head.exp", "scale_not_cover")


def test_atol_jump_is_counted_in_quantization_steps(tmp_path):
    """A ReLU up to 15 after a sigmoid in [0, 1]: 20x the Atol at a 15x coarser qscale is
    about as many quantization steps, no jump; the same Atol at the sigmoid's qscale is
    100 steps, a jump. With Cosine in the clean band that is an outlier of a few elements
    (knowledge.md §16 R3.8), never a sharp cosine drop."""
    from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers

    def rows(wide: bool):
        return [layer("se.sigmoid", 0.9995, base=(0.0, 1.0), atol=0.02, qscale=0.0039),
                layer("activ", 0.9995, base=(0.0, 15.0 if wide else 1.0), atol=0.4,
                      qscale=0.06 if wide else 0.0039)]
    agree = read_layers(load_compare(write_compare(tmp_path / "a", rows(True), "23", "csv")))
    assert agree.origin is None and agree.pattern == "none"
    jump = read_layers(load_compare(write_compare(tmp_path / "b", rows(False), "23", "csv")))
    assert (jump.origin, jump.pattern, jump.curve["fired"]) == (1, "outlier", "atol_jump")
