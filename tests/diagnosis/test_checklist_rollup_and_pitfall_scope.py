"""Knowledge revision 2, one scenario per decision: the checklist roll-up (§10), pitfall
scope (§12), post-processing in the analysed model (§13), facts from this machine (§4),
and the wording of the reports (§14: one language, no raw ids, no contradictions).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.environment import THIS_MACHINE
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.diagnose import rolled_up
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.intake.prompts import ScriptedPrompter
from qcdoctor.engine.intake.session import Intake
from qcdoctor.engine.matching.rulebook import rule_by_id
from qcdoctor.engine.reports.formats import render
from tests.conftest import triage_dict
from tests.deploy.scripts import MISTAKES
from tests.diagnosis.test_deploy_audit import make_case

N, A, U = {"status": "normal"}, {"status": "abnormal"}, {"status": "unknown"}
CONVERT = {"evidence": ["dataset_eval"], "badcase": "available",
           "stages": {"qat_bc": N, "quantized_bc": A}}


def _item(report: dict, item: str) -> dict:
    return next(c for c in report["checklist"] if c["id"] == item)


def _pitfalls(report: dict) -> set[str]:
    return {p["id"] for p in report["pitfalls"]}


def _cautions(report: dict) -> set[str]:
    return {c["id"] for c in report["cautions"]}


# --- §10: finer checks roll up into the five mandatory items -----------------------

def test_wrong_preprocess_mode_fails_input_preprocessing(tmp_path):
    folder = make_case(tmp_path / "case", MISTAKES["wrong_mode"])
    report = triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)
    pre = _item(report, "input_preprocessing")
    assert pre["status"] == "fail" and "provide" not in pre
    assert [p["id"] for p in pre["parts"]] == ["preprocess_mode"]
    assert _item(report, "preprocess_mode")["status"] == "fail"
    table = render(report, "md").split("### Deployment checklist")[1]
    row = next(line for line in table.splitlines() if line.startswith("| Input pre-processing"))
    # the finer check states its failure
    assert "| FAIL |" in row and \
        "finer check: insert_image_preprocess mode does not match the training colour space" in row


@pytest.mark.parametrize("own,expected", [
    # worst wins: fail > unknown > pass
    ({"padding": "pass", "nv12_even_size": "fail"}, {"padding": ("fail", ["nv12_even_size"])}),
    ({"pre_post_nodes": "pass", "qdq_io_types": "unknown", "qdq_after_convert": "pass"},
     {"pre_post_nodes": ("unknown", ["qdq_io_types"])}),
    ({"layout": "fail", "input_source": "pass"}, {"layout": ("fail", [])}),
    # a finer check alone decides an item nothing else judged
    ({"insert_before_convert": "fail", "qdq_after_convert": "fail"},
     {"pre_post_nodes": ("fail", ["insert_before_convert", "qdq_after_convert"])}),
    # n/a and compile settings (march, core_num) never roll up; unjudged items say nothing
    ({"input_preprocessing": "pass", "preprocess_mode": "not_applicable",
      "march_consistency": "fail", "core_num": "fail"}, {"input_preprocessing": ("pass", [])}),
    ({}, {}),
])
def test_roll_up_worst_wins(own, expected):
    assert rolled_up(own) == expected


def test_failure_only_through_a_finer_check_is_named_once_in_words(tmp_path):
    folder = make_case(tmp_path / "case", MISTAKES["insert_after_convert"])
    report = triage_case(load_case(folder), lang="zh", environ={}, installed={}, cwd=folder)
    st150 = [e["text"] for e in report["conclusion"]["evidence"] if e["rule"] == "ST150"]
    assert st150 == ["问题落在 compile/部署，且部署清单的检查失败（有前处理节点不在 convert 之前插入）："
                     "这是用户侧适配错误，先修正它再看是否仍有差异。"]
    assert _item(report, "pre_post_nodes")["status"] == "fail"
    bound = [f for t in report["trace"] if t["rule"] == "ST150" for f in t["facts"]
             if f["type"] == "checklist"]
    assert [(f["item"], f["rolled_up"]) for f in bound] == [("insert_before_convert", False)]


# --- §12: pitfall scope ------------------------------------------------------------

def test_normal_hbm_x86_verifies_quantized_bc_indirectly():
    case = {"evidence": ["dataset_eval"], "badcase": "available",
            "stages": {"qat": N, "quantized_bc": U, "hbm_x86": N, "board": A}}
    assert "unverified_quantized_bc" not in _cautions(triage_dict(case))
    case["stages"]["hbm_x86"] = U
    report = triage_dict(case)
    # nobody blamed compile yet: a reminder, not a mistake seen in the case (R3.14)
    assert "unverified_quantized_bc" in _cautions(report)
    assert "unverified_quantized_bc" not in _pitfalls(report)


@pytest.mark.parametrize("run,expected", [
    ({"baseline": "qat_export", "analysis": "quantized_bc"}, True),
    ({"baseline": "qat_export", "analysis": "qat_bc", "separate_runs": True}, False),
    ({"baseline": "qat_bc", "analysis": "quantized_bc"}, False),     # bc vs bc: one run is right
])
def test_task_list_inputs_compared_in_one_run(run, expected):
    report = triage_dict({**CONVERT, "has_task_input": True,
                          "analyses_run": [{"type": "convert", **run}]})
    assert ("input_format_mismatch" in _pitfalls(report)) is expected
    if expected:
        assert next(p for p in report["pitfalls"] if p["id"] == "input_format_mismatch")["rule"] \
            == "PF051"


# --- §13: post-processing in the analysed model --------------------------------------

@pytest.mark.parametrize("value,zh,en", [
    ("yes", "后处理保留在被分析的模型内", "Post-processing kept inside the analysed model"),
    ("no", "后处理未包含在被分析的模型内", "Post-processing left out of the analysed model"),
    (None, "后处理是否包含在被分析的模型内（在 case.yaml 中写 `postprocess_in_model: yes`",
     "Whether post-processing was inside the model QuantAnalysis analysed"),
])
def test_postprocess_in_model_is_reported_with_the_analyses(value, zh, en):
    """Stated, it is said with the analyses run; not stated, it is asked for (never listed
    as a check already run)."""
    run = [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc", "out_dir": "qa"}]
    data = {**CONVERT, "analyses_run": run}
    if value:
        data["postprocess_in_model"] = value
    for lang, text in (("zh", zh), ("en", en)):
        report = triage_dict(data, lang=lang)
        case = next(f for f in report["facts"] if f["type"] == "case")
        assert case["postprocess_in_model"] == (value or "unknown")
        md = render(report, "md")
        checks = md[md.index("## " + ("执行过的检查" if lang == "zh" else "Checks already run")):]
        needed = md[md.index("### " + ("需要用户补充的信息或产物" if lang == "zh"
                                       else "Information still needed")):]
        assert text in (checks.split("##")[1] if value else needed.split("##")[1])
        assert ("postprocess_in_model" in checks.split("##")[1]) is False


def test_postprocess_in_model_is_not_mentioned_without_analyses():
    md = render(triage_dict({**CONVERT, "postprocess_in_model": "yes"}), "md")
    assert "Post-processing kept inside" not in md


def test_bad_postprocess_in_model_value_names_the_key(tmp_path, capsys):
    (tmp_path / "case.yaml").write_text("schema: qcdoctor/case-v1\npostprocess_in_model: maybe\n",
                                        encoding="utf-8")
    assert main(["triage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "case.yaml:2" in err and "postprocess_in_model" in err and "yes | no | unknown" in err


# --- §4: facts from this machine ------------------------------------------------------

INSTALLED = {"hbdk4-compiler": ("4.9.0", THIS_MACHINE + "installed package hbdk4-compiler")}


def _convert_case(tmp_path: Path, **extra) -> Path:
    folder = tmp_path / "case"
    folder.mkdir(exist_ok=True)
    (folder / "case.yaml").write_text(yaml.safe_dump({"schema": "qcdoctor/case-v1", **CONVERT,
                                                      **extra}), encoding="utf-8")
    return folder


@pytest.mark.parametrize("lang,marker", [("zh", "来自本机环境"), ("en", "from this machine")])
def test_this_machine_is_marked_in_the_report(tmp_path, lang, marker):
    folder = _convert_case(tmp_path)
    report = triage_case(load_case(folder), lang=lang, environ={"BOARD_TYPE": "nash-e"},
                         installed=INSTALLED, cwd=folder)
    line = next(s for s in render(report, "md").splitlines() if "hbdk4-compiler 4.9.0" in s)
    assert line.count(marker) == 2                   # the march and the compiler version
    sources = {f["type"]: f["source"] for f in report["facts"] if f["type"] in ("platform",)}
    assert sources["platform"] == THIS_MACHINE + "environment variable BOARD_TYPE"


def test_case_values_win_and_are_not_marked(tmp_path):
    folder = _convert_case(tmp_path, platform={"chip": "J6M"},
                           versions={"hbdk4-compiler": "4.4.1"})
    report = triage_case(load_case(folder), lang="en", environ={"BOARD_TYPE": "nash-e"},
                         installed=INSTALLED, cwd=folder)
    md = render(report, "md")
    assert "J6M / nash-m; " in md and "hbdk4-compiler 4.4.1;" not in md
    assert "hbdk4-compiler 4.4.1" in md and "from this machine" not in md


def test_no_env_on_triage_audit_and_collect(tmp_path, capsys, monkeypatch):
    folder = _convert_case(tmp_path)
    monkeypatch.setenv("BOARD_TYPE", "nash-p")
    monkeypatch.chdir(tmp_path)
    assert main(["collect", str(folder), "--format", "json"]) == 0
    with_env = json.loads(capsys.readouterr().out)
    assert any(f["source"].startswith(THIS_MACHINE) for f in with_env)
    for command in (["collect", str(folder), "--format", "json", "--no-env"],
                    ["triage", str(folder), "--format", "json", "--no-env"],
                    ["audit", str(folder), "--format", "json", "--no-env"]):
        assert main(command) == 0
        out = json.loads(capsys.readouterr().out)
        facts = out if isinstance(out, list) else out["facts"]
        assert not any(str(f.get("source", "")).startswith(THIS_MACHINE) for f in facts), command
        platform = next(f for f in facts if f["type"] == "platform")
        assert platform["known"] is False


def test_intake_writes_what_it_collected_into_the_case(tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    answers = tmp_path / "answers.yaml"
    answers.write_text("{}\n", encoding="utf-8")
    intake = Intake(folder, ScriptedPrompter(answers, stdout=io.StringIO()), lang="en",
                    environ={"BOARD_TYPE": "nash-e"}, installed=INSTALLED, strict=True)
    intake.run()
    text = (folder / "case.yaml").read_text(encoding="utf-8")
    case = load_case(folder)
    assert case.get("platform") == {"march": "nash-e"}
    assert case.get("versions") == {"hbdk4-compiler": "4.9.0"}
    assert "# this machine: environment variable BOARD_TYPE" in text    # where it came from
    assert "# this machine: installed package hbdk4-compiler" in text
    # the folder is now self-contained: without this machine it says the same
    again = triage_case(case, lang="en", environ={}, installed={}, cwd=folder, use_env=False)
    versions = {f["package"]: f["version"] for f in again["facts"] if f["type"] == "version"}
    assert versions["hbdk4-compiler"] == "4.9.0"


# --- §14: the wording -------------------------------------------------------------------

def test_st050_rationale_and_cs023_residual_wording():
    assert rule_by_id("ST050").rationale["zh"] == \
        "export 之后仍正常、convert 之后才下降，说明 convert 引入了误差。"
    cs023 = rule_by_id("CS023").message["zh"]
    assert "万分之几" in cs023 and "约万分之一" not in cs023


def test_compile_report_on_j6p_does_not_contradict_itself():
    report = triage_dict({"evidence": ["dataset_eval"], "badcase": "available",
                          "platform": {"chip": "J6P"},
                          "stages": {"quantized_bc": N, "hbm_x86": A}}, lang="zh")
    assert report["conclusion"]["stage"] == "compile"
    md = render(report, "md")
    assert "不适用（compile / 部署问题不使用 QuantAnalysis）" in md
    assert "走 QuantAnalysis" not in md


def test_user_check_conclusion_names_only_the_failed_check():
    report = triage_dict({**CONVERT, "user_checks": {"same_qconfig": "no", "same_march": "yes"}},
                         lang="zh")
    text = next(e["text"] for e in report["conclusion"]["evidence"] if e["rule"] == "ST160")
    assert "「各阶段 qconfig 相同」" in text
    assert not any(word in text for word in ("checkpoint", "march", "前后处理", "same_qconfig"))


@pytest.mark.parametrize("lang", ("zh", "en"))
def test_keep_list_names_are_in_the_report_language(lang, tmp_path):
    report = triage_dict({"evidence": ["dataset_eval"], "badcase": "available",
                          "stages": {"quantized_bc": N, "hbm_x86": A}}, lang=lang)
    names = [k["name"] for k in report["artifacts"]["keep"]]
    if lang == "zh":
        assert {"compile 配置", "日志", "x86 与板端的输入/输出 dump"} <= set(names)
        assert not {"compile config", "logs"} & set(names)
    else:
        assert {"compile config", "logs"} <= set(names)
    convert = triage_dict(CONVERT, lang=lang)["artifacts"]["keep"]
    editor = {"zh": "bc_editor 配置与编辑后的 bc（如使用）", "en": "bc_editor config + edited bc (if used)"}
    assert editor[lang] in [k["name"] for k in convert]


def test_chinese_report_punctuation_and_labels():
    report = triage_dict({"title": "convert 掉点", "evidence": ["dataset_eval"],
                          "badcase": "available", "stages": {"hbm_x86": N, "board": A}},
                         lang="zh")
    md = render(report, "md")
    assert md.startswith("# 一致性问题定位报告：convert 掉点\n")
    assert "- **当前最可能阶段：用户侧适配**（已确定；疑似原因：板端部署接入与数据准备）" in md
    for label in ("案例：", "证据：", "正常产物：", "异常产物：", "平台 / 版本：", "证据类型：", "依据的规则："):
        assert label in md
    assert ": " not in md.split("```")[0].replace("case.yaml:", "")
    assert "board 异常" not in md and "| 板端 | 异常 |" in md
