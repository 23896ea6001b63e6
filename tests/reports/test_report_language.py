"""Reports speak one language: no English prose in Chinese reports, no raw ids in prose.

Every bundled example and many scenario cases (every row of the stage table, strategy
and pitfall cases, every deployment mistake, every QuantAnalysis reading) are rendered
in Chinese; what is left after code, file references and user/tool text are removed may
hold Latin words only when they are technical terms of the toolchain (ALLOWED) or
identifiers (with _ . / - or digits, or all capitals).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qcdoctor.catalogues import checklist_items
from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.reports.formats import render
from qcdoctor.wording import id_words, labels
from tests.conftest import triage_dict
from tests.deploy.scripts import MISTAKES
from tests.diagnosis.test_deploy_audit import make_case
from tests.diagnosis.test_stage_mapping import ROWS, _case
from tests.qa.scenarios import SCENARIOS, build

# Technical terms a Chinese report keeps in Latin letters: API, tool, model, op and metric
# names, and the quantization vocabulary Horizon's own Chinese documents use.
ALLOWED = {
    # tools, APIs, artifacts
    "QuantAnalysis", "QatBcEditor", "ConsistencyStrategy", "FakeQuantState", "qcdoctor",
    "bc", "hbm", "qat", "badcase", "dump", "checkpoint", "qconfig", "march", "observer",
    "prepare", "compile", "convert", "export", "sensitivity", "dataloader", "deploy",
    "txt", "csv", "psql", "help", "vs", "True", "False", "None", "torch", "profiler", "hbir",
    "quantized", "float", "calib", "calibration", "OpenCV", "nms", "argmax", "uv", "max",
    "run", "eval", "permutes",
    # quantization and deployment vocabulary
    "scale", "qscale", "qmax", "qpp", "requantize", "level", "latency", "bias", "weight",
    "activation", "layout", "Layout", "padding", "Padding", "resize", "bilinear", "nearest",
    "transpose", "mode", "pyramid", "resizer", "ddr", "rgb", "bgr", "nv12", "gray",
    "featuremap", "linear", "conv", "Quantize", "Dequantize", "clamp", "exp", "rsqrt",
    "reciprocal", "sin", "cos", "first", "last", "id",
    # metric names
    "Cosine", "Atol", "mAP", "mIoU", "mATE", "mAOE", "recall", "error_rate",
}
_LATIN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/+']*")


def _user_and_tool_text(report: dict) -> list[str]:
    """Text the report quotes as given: the case title, the profiler's own messages."""
    quoted = [report["case"]["title"]]
    quoted += [f["message"] for f in report["facts"] if f["type"] == "advisor_message"]
    quoted += [f["output"] for f in report["facts"] if f["type"] == "sensitivity_summary"]
    return [q for q in quoted if q]


def english_left(report: dict, text: str) -> set[str]:
    for quoted in _user_and_tool_text(report):
        text = text.replace(quoted, "")
    text = re.sub(r"```.*?```", "", text, flags=re.S)          # generated code
    text = re.sub(r"`[^`\n]*`", "", text)                      # inline code
    text = re.sub(r"<[^>]+>", "", text)                        # <br> in tables
    text = re.sub(r"\\([\\`*_\[\]#+\-.!|>])", r"\1", text)  # Markdown escapes of user text
    text = re.sub(r"[\w./-]+\.yaml(:\d+)? \([^)]*\)", "", text)   # case.yaml:12 (stages.x)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("依据的规则"))
    found = set()
    for word in _LATIN.findall(text):
        if re.search(r"[_./\d\-+]", word) or word.isupper() or word in ALLOWED or len(word) == 1:
            continue
        found.add(word)
    return found


def _examples():
    for name in example_names():
        with example_path(name) as path:
            yield name, triage_case(load_case(path), lang="zh", environ={}, installed={},
                                    cwd=path, full_checklist=True)


def _scenarios(tmp: Path):
    for stages, _, _ in ROWS:
        yield f"stages:{'-'.join(stages) or 'none'}", triage_dict(_case(**stages), lang="zh")
    convert = {"evidence": ["dataset_eval"], "badcase": "none", "symptom": "drop",
               "stages": {"qat_bc": {"status": "normal"}, "quantized_bc": {"status": "abnormal"}}}
    for extra in ({"platform": {"chip": "J6E"}, "versions": {"hbdk4-compiler": "4.4.2"},
                   "retrain": "yes", "consistency_level": 1},
                  {"platform": {"chip": "J6P"}, "input_format_differs": True,
                   "has_task_input": True, "fake_quant_state": "float",
                   "analyses_run": [{"type": "convert", "baseline": "qat_export",
                                     "analysis": "quantized_bc"}]},
                  {"evidence": ["single_frame"], "user_checks": {"same_march": "no"}}):
        yield f"convert:{sorted(extra)}", triage_dict({**convert, **extra}, lang="zh")
    for mistake, script in MISTAKES.items():
        folder = make_case(tmp / mistake, script)
        yield f"deploy:{mistake}", triage_case(load_case(folder), lang="zh", environ={},
                                               installed={}, cwd=folder)
    for kind in SCENARIOS:
        folder = build(kind, tmp / "qa")
        yield f"qa:{kind}", triage_case(load_case(folder), lang="zh", environ={}, installed={},
                                        cwd=folder)


def test_no_english_prose_in_chinese_reports(tmp_path):
    leaks = {}
    for name, report in [*_examples(), *_scenarios(tmp_path)]:
        for audit in (False, True):
            left = english_left(report, render(report, "md", audit=audit))
            if left:
                leaks[name] = sorted(left)
    assert not leaks, leaks


def test_the_scanner_finds_english_prose():
    report = triage_dict(_case(qat_bc={"status": "normal"}, quantized_bc={"status": "abnormal"}),
                         lang="zh")
    text = render(report, "md")
    assert english_left(report, text) == set()
    assert english_left(report, text + "\n- 产物: compile config, logs ← derived from x") == \
        {"config", "logs", "derived", "from"}


@pytest.mark.parametrize("lang", ("zh", "en"))
def test_every_id_shown_in_prose_has_words(lang):
    """Suspects, bad-case values, evidence kinds, user checks: never the raw id in prose."""
    suspects = {r.then["conclusion"].get("suspect") for r in load_rules() if "conclusion" in r.then}
    # a suspect filled from a bound fact names a checklist item: shown by its title
    filled = {s for s in suspects if s and "{" in s}
    assert filled <= {"{checklist.item}"}, filled
    assert all(id_words(item, lang) != item for item in checklist_items())
    words = labels()[lang]["words"]
    for table, ids in (("suspect", suspects - {None, ""} - filled),
                       ("badcase", {"available", "dataset_only", "none", "unknown"}),
                       ("evidence", {"dataset_eval", "reproducible_badcase", "multi_frame_visual",
                                     "single_frame"}),
                       ("user_check", {"same_checkpoint", "same_qconfig", "same_march",
                                       "same_prepost"})):
        assert ids <= set(words[table]), (table, ids - set(words[table]))
        for i in ids - {"unknown", "none"}:       # plain words already in English
            assert id_words(i, lang) != i


@pytest.mark.parametrize("lang", ("zh", "en"))
def test_summary_shows_suspect_and_bad_case_in_words(lang):
    report = triage_dict({"evidence": ["dataset_eval"], "badcase": "dataset_only",
                          "stages": {"qat": {"status": "normal"}, "board": {"status": "abnormal"}}},
                         lang=lang)
    text = render(report, "md")
    assert report["conclusion"]["suspect"] == "wide_gap"
    assert "wide_gap" not in text and "dataset_only" not in text.split("```")[0]
    assert id_words("wide_gap", lang) in text and id_words("dataset_only", lang) in text
    if lang == "zh":
        assert "疑似原因：" in text and "怀疑方向" not in text
        assert text.startswith("# 一致性问题定位报告") and "当前最可能阶段：" in text
        assert "board 异常" not in text and "板端" in text
