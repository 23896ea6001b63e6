"""Knowledge revision 3, the stage chain (knowledge.md §16 R3.1-R3.4).

One scenario per decision: a case folder is written, triaged end to end through the
folder entry point (``triage_path``, what ``qcdoctor triage CASE`` runs), and the
conclusion, the missing items, the findings, the order of the next actions and the
rendered reports (Markdown, HTML, terminal, JSON; zh and en) are checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.metric_direction import metric_direction
from qcdoctor.collectors.stages import ADJACENT_STEPS, UNSPLIT_STEPS
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.derived import conclusion_fact
from qcdoctor.engine.matching.patterns import oracle_bindings
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.matching.runner import Hit
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.fact_types import normalise
from tests.qa.scenarios import build

CONFIRMED = {"same_checkpoint": "yes", "same_qconfig": "yes", "same_march": "yes",
             "same_prepost": "yes"}
PLATFORM = {"platform": {"chip": "J6E", "march": "nash-e"},
            "versions": {"horizon-plugin-pytorch": "3.1.5", "horizon-plugin-profiler": "3.1.5",
                         "hbdk4-compiler": "4.4.2"}}


def write_case(folder: Path, stages: dict, **extra) -> Path:
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
            "symptom": "accuracy drop", "user_checks": CONFIRMED, "fake_quant_state": "validation",
            **PLATFORM, "stages": stages, **extra}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return folder


def triage(folder: Path, lang: str = "en") -> dict:
    return triage_path(folder, lang=lang, use_env=False, environ={}, installed={})


def values(metric: str, **stages) -> dict:
    return {stage: {"metric": metric, "value": v} for stage, v in stages.items()}


def stage_of(report: dict, name: str) -> dict:
    return next(f for f in report["facts"] if f["type"] == "stage" and f["stage"] == name)


def facts_of(report: dict, ftype: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == ftype]


def verdict(report: dict) -> tuple[str, str, bool]:
    c = report["conclusion"]
    return c["stage"], c["suspect"], c["determined"]


def action_ids(report: dict) -> list[str]:
    return [a["id"] for a in report["next_actions"]]


def section(markdown: str, heading: str) -> str:
    """The text under a Markdown heading, up to the next heading of any level."""
    start = markdown.index(heading) + len(heading)
    rest = markdown[start:]
    ends = [i for i in (rest.find("\n## "), rest.find("\n### ")) if i >= 0]
    return rest[:min(ends)] if ends else rest


def stage_row(markdown: str, label: str) -> str:
    return next(line for line in markdown.splitlines() if line.startswith(f"| {label} |"))


def all_formats(report: dict) -> dict[str, str]:
    return {"md": render(report, "md"), "html": render(report, "html"),
            "terminal": render_terminal(report, color=False, width=400),
            "json": render(report, "json")}


# --- R3.1 metric direction ---------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [
    ("minADE", (False, "metric name")), ("minFDE", (False, "metric name")),
    ("ADE", (False, "metric name")), ("FDE@6", (False, "metric name")),
    ("brier-minFDE", (False, "metric name")), ("chamfer_dist", (False, "metric name")),
    ("Brier", (False, "metric name")), ("L1", (False, "metric name")),
    ("l2_error", (False, "metric name")), ("rmse_log", (False, "metric name")),
    ("RMSElog", (False, "metric name")), ("mATE", (False, "metric name")),
    ("mAP@0.5", (True, "metric name")), ("mIoU", (True, "metric name")),
    ("Top-1", (True, "metric name")), ("AUC", (True, "metric name")),
    ("PSNR", (True, "metric name")), ("ssim", (True, "metric name")),
    ("acc", (True, "metric name")),
    ("mNLL", (None, "unknown")), ("success_rate", (None, "unknown")),
    ("accurate", (None, "unknown")), ("score", (None, "unknown")),
    ("", (True, "default")),
])
def test_the_name_gives_a_direction_only_by_known_tokens(name, expected):
    assert metric_direction(name, None) == expected
    assert metric_direction(name, False) == (False, "case")


def test_min_ade_is_lower_is_better_from_its_name(tmp_path):
    case = write_case(tmp_path / "traj", values("minADE", qat=1.20, qat_export=1.205,
                                               qat_bc=1.21, quantized_bc=1.45))
    report = triage(case)
    assert verdict(report) == ("convert", "convert_requantize", True)
    md = render(report, "md")
    assert "Metric direction: minADE: lower is better, from the metric name" in md
    assert "higher is better, from the metric name" not in md
    assert "rises 0.24 above qat.bc (lower is better), beyond tolerance" in stage_row(
        md, "quantized.bc")
    assert not facts_of(report, "direction_readings")


def _mnll_case(tmp_path: Path, **extra) -> Path:
    # lower is better: quantized.bc worse than qat.bc (convert); higher is better:
    # quantized.bc clearly better than qat.bc (an evaluation inconsistency)
    return write_case(tmp_path / "mnll", values("mNLL", qat=0.452, qat_export=0.451,
                                                qat_bc=0.452, quantized_bc=0.50), **extra)


def test_a_direction_the_name_does_not_give_is_read_both_ways(tmp_path):
    report = triage(_mnll_case(tmp_path))
    assert verdict(report) == ("undetermined", "metric_direction_unknown", False)
    assert "higher_is_better" in [m["id"] for m in report["missing"]]
    assert action_ids(report)[0] == "state_metric_direction"
    readings = facts_of(report, "direction_readings")[0]
    assert (readings["agree"], readings["lower_stage"], readings["higher_stage"],
            readings["higher_suspect"]) == (False, "convert", "undetermined",
                                             "evaluation_inconsistent")
    # no verdict is drawn from a reading: no transition, rise or further drop is stated
    assert not any(facts_of(report, t) for t in ("transition", "stage_rise", "further_drop"))
    assert stage_of(report, "quantized_bc")["status"] == "unknown"
    for fmt, text in all_formats(report).items():
        assert "from the metric name" not in text, fmt
        assert "if lower is better: convert" in text and "if higher is better: undetermined" \
            in text, fmt
    md = render(report, "md")
    assert "changes by 0.048 against qat.bc; whether that is a loss depends" in stage_row(
        md, "quantized.bc")
    assert "Metric direction: mNLL: direction unknown" in md
    assert "None." not in section(md, "### Information still needed")
    zh = render(triage(_mnll_case(tmp_path), lang="zh"), "md")
    assert "若越低越好：convert" in zh and "若越高越好：暂不能判断（各阶段评测不一致）" in zh
    assert "由指标名判断" not in zh


def test_the_direction_given_in_the_case_ends_the_doubt(tmp_path):
    report = triage(_mnll_case(tmp_path, higher_is_better=False))
    assert verdict(report) == ("convert", "convert_requantize", True)
    assert "higher_is_better" not in [m["id"] for m in report["missing"]]
    assert "mNLL: lower is better, from higher_is_better in case.yaml" in render(report, "md")


def test_two_readings_that_agree_conclude_and_say_so(tmp_path):
    case = write_case(tmp_path / "agree", values("mNLL", qat=0.452, qat_bc=0.451,
                                                quantized_bc=0.4515, hbm_x86=0.452,
                                                board=0.4518))
    report = triage(case)
    assert verdict(report) == ("none", "", True)
    assert [e["rule"] for e in report["conclusion"]["evidence"]] == ["ST110", "ST172"]
    assert not report["missing"]
    md = render(report, "md")
    assert "read both ways, the chain gives the same answer: no consistency problem" in md
    assert "from the metric name" not in md
    assert "within tolerance 0.00452 whichever way the metric improves" in stage_row(md, "qat.bc")


# --- R3.2 units --------------------------------------------------------------------------

def test_percent_and_fraction_are_not_compared(tmp_path):
    case = write_case(tmp_path / "units", values("mAP", qat=45.2, qat_bc=0.449,
                                                quantized_bc=0.391))
    report = triage(case)
    assert verdict(report) == ("undetermined", "metric_scale_mismatch", False)
    finding = next(f for f in report["findings"] if f["rule"] == "ST170")
    assert "qat.pt 45.2" in finding["text"] and "qat.bc 0.449, quantized.bc 0.391" in \
        finding["text"]
    assert action_ids(report) == ["restate_metric_scale"]
    assert not any(facts_of(report, t) for t in ("transition", "stage_rise", "further_drop"))
    assert [stage_of(report, s)["status"] for s in ("qat", "qat_bc", "quantized_bc")] == \
        ["normal", "unknown", "unknown"]
    for fmt, text in all_formats(report).items():
        assert "44.751" not in text and "44.809" not in text, fmt      # no drop across scales
    md = render(report, "md")
    assert "not compared: the values of this metric mix percent and fraction" in stage_row(
        md, "qat.bc")
    needed = section(md, "### Information still needed")
    assert "Restate every stage's mAP" in needed and "[AN086]" in needed
    zh = render(triage(case, lang="zh"), "md")
    assert "混用了百分数与小数" in zh and "44.751" not in zh


def test_one_value_a_hundred_times_another_is_another_scale(tmp_path):
    case = write_case(tmp_path / "ratio", values("score", qat=45.2, qat_bc=45.0,
                                                quantized_bc=0.46), higher_is_better=True)
    report = triage(case)
    assert verdict(report)[:2] == ("undetermined", "metric_scale_mismatch")
    scale = facts_of(report, "metric_scale")[0]
    assert (scale["kind"], scale["high"], scale["low"]) == ("ratio", "qat", "quantized_bc")


@pytest.mark.parametrize("chain", [
    {"qat": 45.2, "qat_bc": 44.9, "quantized_bc": 39.1},
    # a fraction metric collapsing a hundredfold stays on its scale: a drop, not a unit
    {"qat": 0.452, "qat_bc": 0.449, "quantized_bc": 0.0045},
])
def test_values_on_one_scale_are_compared(tmp_path, chain):
    report = triage(write_case(tmp_path / "same", values("mAP", **chain)))
    assert verdict(report) == ("convert", "convert_requantize", True)
    assert not facts_of(report, "metric_scale")


# --- R3.3 several drops ------------------------------------------------------------------

def _two_drops(tmp_path: Path, metric: str = "mAP", **chain) -> Path:
    chain = chain or {"qat": 0.452, "qat_export": 0.430, "qat_bc": 0.380}
    return write_case(tmp_path / "drops", values(metric, **chain))


def test_a_further_drop_gets_its_own_stage_and_action(tmp_path):
    report = triage(_two_drops(tmp_path))
    assert verdict(report) == ("pre_export", "lut_fixed_point", True)
    further = facts_of(report, "further_drop")
    assert [(f["from"], f["to"], f["stage"], f["drop"]) for f in further] == \
        [("qat_export", "qat_bc", "export", 0.05)]
    finding = next(f for f in report["findings"] if f["rule"] == "ST180")
    assert "qat.bc loses 0.05 against qat.export.pt" in finding["text"]
    assert "at export" in finding["text"]
    ids = action_ids(report)
    # the first abnormal stage's actions come first, the further drop's after them
    assert ids[0] == "qa_pre_export" and "qa_export" in ids
    assert ids.index("qa_export") > ids.index("qa_pre_export")
    export = next(a for a in report["next_actions"] if a["id"] == "qa_export")
    assert (export["baseline"], export["analysis"], export["analysis_model_type"]) == \
        ("qat_export", "qat_bc", "export")
    assert stage_of(report, "qat_bc")["step_from"] == "qat_export"
    step = "step from qat.export.pt: drop 0.05, beyond tolerance 0.0043: a further drop"
    against_reference = "drop 0.072 vs qat.pt exceeds tolerance 0.00452"
    texts = all_formats(report)
    for fmt in ("md", "html", "terminal"):
        assert step in texts[fmt] and against_reference in texts[fmt], fmt
    row = stage_row(texts["md"], "qat.bc")
    assert row.index(against_reference) < row.index(step)
    assert "step from" not in stage_row(texts["md"], "qat.export.pt")
    assert json.loads(texts["json"])["conclusion"]["stage"] == "pre_export"
    zh = render(triage(_two_drops(tmp_path), lang="zh"), "md")
    assert "相对前一阶段 qat.export.pt 下降 0.05，超过容差 0.0043：又一次下降" in zh


def test_a_step_within_the_tolerance_is_no_further_drop(tmp_path):
    report = triage(_two_drops(tmp_path, qat=0.452, qat_export=0.430, qat_bc=0.428))
    assert verdict(report)[0] == "pre_export"
    assert not facts_of(report, "further_drop")
    assert "ST180" not in [f["rule"] for f in report["findings"]]
    assert "qa_export" not in action_ids(report)
    assert "step from qat.export.pt: drop 0.002, within tolerance 0.0043" in stage_row(
        render(report, "md"), "qat.bc")


def test_a_further_drop_of_a_lower_is_better_metric_is_a_rise(tmp_path):
    report = triage(_two_drops(tmp_path, "error_rate", qat=0.100, qat_export=0.1005,
                               qat_bc=0.131, quantized_bc=0.170))
    assert verdict(report)[0] == "export"
    further = facts_of(report, "further_drop")
    assert [(f["from"], f["to"], f["stage"]) for f in further] == \
        [("qat_bc", "quantized_bc", "convert")]
    assert "qa_convert" in action_ids(report)
    assert "step from qat.bc: rises 0.039 (lower is better), beyond tolerance" in stage_row(
        render(report, "md"), "quantized.bc")


def test_a_further_drop_across_unevaluated_stages_asks_to_split_it(tmp_path):
    report = triage(_two_drops(tmp_path, qat=0.452, qat_export=0.451, qat_bc=0.40,
                               board=0.30))
    assert verdict(report) == ("export", "hbir_export", True)
    further = facts_of(report, "further_drop")[0]
    assert (further["from"], further["to"], further["gap"], further["bisect"],
            further["stage"]) == ("qat_bc", "board", 2, "quantized_bc", "undetermined")
    assert "ST181" in [f["rule"] for f in report["findings"]]
    assert "evaluate_quantized_bc" in action_ids(report)
    assert "stage_result:quantized_bc" in report["ask"]


def _conclusion_of(transition: dict) -> tuple[str, str]:
    fact = normalise({"type": "transition", **transition})
    rules = [r for r in load_rules() if "conclusion" in r.then and oracle_bindings(r.when, [fact])]
    hits = sorted((Hit(rule=r, facts={}) for r in rules), key=lambda h: h.sort_key)
    found = conclusion_fact(hits)
    return found["stage"], found["suspect"]


@pytest.mark.parametrize("step,named", [
    *[((a, b, 0, ""), v) for (a, b), v in ADJACENT_STEPS.items()],
    *[((a, b, 1, skipped), v) for (a, b, skipped), v in UNSPLIT_STEPS.items()],
])
def test_the_names_of_further_steps_are_the_stage_rules_names(step, named):
    """A further drop or a reading is named as the stage rules would name that drop."""
    before, after, gap, skipped = step
    assert _conclusion_of({"from": before, "to": after, "gap": gap, "skipped": skipped}) == named


# --- R3.4 analyses listed but absent; what is still needed --------------------------------

CONVERT = {"qat_bc": {"metric": "mAP", "value": 0.449},
           "quantized_bc": {"metric": "mAP", "value": 0.391}}
CONVERT_RUN = {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
               "out_dir": "qa_convert", "sensitivity": True}


@pytest.mark.parametrize("prepare,problem", [
    (lambda folder: None, "folder_missing"),
    (lambda folder: (folder / "qa_convert").mkdir(), "folder_empty"),
])
def test_an_analysis_listed_without_its_folder_counts_as_not_run(tmp_path, prepare, problem):
    case = write_case(tmp_path / "absent", CONVERT, analyses_run=[CONVERT_RUN])
    prepare(case)
    report = triage(case)
    assert verdict(report)[0] == "convert"
    assert "qa_convert" in action_ids(report)                  # the QuantAnalysis stays
    missing = next(m for m in report["missing"] if m["id"] == "analysis_outputs")
    assert "qa_convert" in missing["question"] and missing["rule"] == "AN087"
    absent = facts_of(report, "analysis_absent")[0]
    assert (absent["out_dir"], absent["problem"]) == ("qa_convert", problem)
    # still a declared run (what the user did), but never an analysis done
    assert facts_of(report, "analysis_run") and not facts_of(report, "analysis_summary")
    md = render(report, "md")
    assert "counted as not run" in section(md, "## Checks already run")
    needed = section(md, "### Information still needed")
    assert "[AN087]" in needed and "qa_convert" in needed
    zh = render(triage(case, lang="zh"), "md")
    assert "按未运行处理" in section(zh, "### 需要用户补充的信息或产物")


def test_an_analysis_whose_folder_holds_its_outputs_counts_as_run(tmp_path):
    case = build("cliff", tmp_path)
    report = triage(case)
    assert verdict(report)[0] == "convert"
    assert "qa_convert" not in action_ids(report)
    assert not facts_of(report, "analysis_absent")
    assert "analysis_outputs" not in [m["id"] for m in report["missing"]]


def test_an_unreadable_table_leaves_the_analysis_not_run(tmp_path):
    case = write_case(tmp_path / "damaged", CONVERT, analyses_run=[CONVERT_RUN])
    (case / "qa_convert").mkdir()
    (case / "qa_convert" / "compare_per_layer_out.txt").write_bytes(b"\xff\xfe\x00garbage\x00")
    report = triage(case)
    assert facts_of(report, "analysis_absent")[0]["problem"] == "tables_unreadable"
    assert "qa_convert" in action_ids(report)


def test_information_still_needed_lists_what_the_actions_wait_for(tmp_path):
    # qat normal, board abnormal: the bisection point must be evaluated by the user
    case = write_case(tmp_path / "gap", values("mAP", qat=0.452, board=0.30))
    report = triage(case)
    assert verdict(report)[:2] == ("undetermined", "wide_gap")
    assert not report["missing"]
    texts = all_formats(report)
    md = texts["md"]
    needed = section(md, "### Information still needed")
    assert "None." not in needed and "[AN080]" in needed
    assert "Evaluate quantized.bc first" in needed
    assert "[AN080]" in texts["terminal"].split("Information still needed")[1]
    assert "AN080" in texts["html"].split('<h3>Information still needed</h3>')[1]


def test_unknown_checklist_items_are_listed_as_information_still_needed(tmp_path):
    case = write_case(tmp_path / "board", values("mAP", qat=0.452, qat_bc=0.451,
                                                quantized_bc=0.450, hbm_x86=0.449,
                                                board=0.30))
    report = triage(case)
    assert verdict(report)[0] == "user_side"
    unknown = [c for c in report["checklist"] if c["status"] == "unknown"]
    assert unknown
    needed = section(render(report, "md"), "### Information still needed")
    assert "None." not in needed
    for item in unknown:                # each by its words, the id only in --format json
        assert f"- {item['title']}" in needed and f"`{item['id']}`" not in needed
    zh = render(triage(case, lang="zh"), "md")
    assert "无。" not in section(zh, "### 需要用户补充的信息或产物")
