"""The deployment checklist audit: compile scripts read statically, configs, every item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.deploy_script import UNKNOWN, read_script
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from qcdoctor.errors import QcdoctorError
from qcdoctor.wording import item_words
from tests.deploy.scripts import CORRECT, DYNAMIC_MODE, MISTAKES

COMPILE_STAGES = {"quantized_bc": {"status": "normal"}, "hbm_x86": {"status": "abnormal"},
                  "board": {"status": "abnormal"}}
TRAIN = {"color": "rgb", "layout": "NCHW", "mean": [123.675, 116.28, 103.53],
         "std": [58.395, 57.12, 57.375], "input_scale": 0.0078125, "padding": "none",
         "resize": "bilinear"}
BOARD = {"color": "nv12", "height": 540, "width": 960, "input_scale": 0.0078125,
         "padding": "none", "resize": "bilinear", "input_source": "pyramid"}


def make_case(root: Path, script: str | None = CORRECT, **extra) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    deploy = {"train": TRAIN, "board": BOARD, "postprocess_same": True}
    if script is not None:
        (root / "deploy").mkdir(exist_ok=True)
        (root / "deploy" / "compile_model.py").write_text(script, encoding="utf-8")
        deploy["script"] = "deploy/compile_model.py"
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "platform": {"chip": "J6E"},
            "stages": COMPILE_STAGES, "deploy": deploy, **extra}
    (root / "case.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return root


def audit(folder: Path, **kw) -> dict:
    return triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder,
                       full_checklist=True, **kw)


def statuses(report: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["checklist"]}


def test_script_reader_follows_aliases_functions_loops_and_constants(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(CORRECT)
    calls = read_script(path)
    assert [c.name for c in calls] == ["insert_transpose", "insert_image_preprocess",
                                       "insert_image_convert", "convert", "remove_io_op", "compile"]
    pre = calls[1]
    assert pre.in_loop and pre.args["mean"] == [123.675, 116.28, 103.53] and pre.args["divisor"] == 1
    assert calls[3].args["march"] == "nash-e" and calls[5].args["march"] == "nash-e"
    assert calls[5].args["core_num"] == 1


def test_script_values_it_cannot_resolve_stay_unknown(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(DYNAMIC_MODE)
    pre = next(c for c in read_script(path) if c.name == "insert_image_preprocess")
    assert pre.args["mode"] is UNKNOWN


def test_scripts_are_never_executed(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "s.py"
    path.write_text(f"open({str(marker)!r}, 'w').write('x')\n" + CORRECT)
    read_script(path)
    assert not marker.exists()


def test_broken_script_is_a_clear_problem(tmp_path):
    path = tmp_path / "s.py"
    path.write_text("def broken(:\n")
    with pytest.raises(QcdoctorError, match="not valid Python") as err:
        read_script(path)
    assert err.value.line == 1


def test_correct_script_passes_its_checks(tmp_path):
    report = audit(make_case(tmp_path / "ok"))
    got = statuses(report)
    passed = ("input_preprocessing", "layout", "input_scale", "padding", "insert_before_convert",
              "qdq_after_convert", "preprocess_mode", "nv12_even_size", "core_num")
    assert {k: got[k] for k in passed} == dict.fromkeys(passed, "pass")
    assert got["qdq_io_types"] == "unknown"              # only Dequantize removed: outputs int
    # ... and that finer check rolls up into its mandatory item (knowledge §10 rev 2)
    nodes = next(c for c in report["checklist"] if c["id"] == "pre_post_nodes")
    assert nodes["status"] == "unknown" and [p["id"] for p in nodes["parts"]] == ["qdq_io_types"]
    assert "DP054" in {f["rule"] for f in report["findings"]}
    assert report["conclusion"]["stage"] == "compile"    # nothing failed: stays compile


@pytest.mark.parametrize("mistake,item,rule,mandatory", [
    ("wrong_mode", "preprocess_mode", "DP063", "input_preprocessing"),
    ("insert_after_convert", "insert_before_convert", "DP040", "pre_post_nodes"),
    ("qdq_before_convert", "qdq_after_convert", "DP050", "pre_post_nodes"),
    ("march_mismatch", "march_consistency", "DP030", None),      # a compile setting
    ("missing_transpose", "layout", "DP020", "layout"),
    ("mean_std_mismatch", "input_preprocessing", "DP010", "input_preprocessing"),
])
def test_each_mistake_fails_its_item_and_turns_compile_into_user_side(tmp_path, mistake, item, rule,
                                                                      mandatory):
    report = audit(make_case(tmp_path / mistake, MISTAKES[mistake]))
    got = statuses(report)
    assert got[item] == "fail"
    failed = {c["id"] for c in report["checklist"] if c["status"] == "fail"}
    assert failed == {item, mandatory} - {None}, "one mistake: its item and its mandatory item"
    evidence = next(c for c in report["checklist"] if c["id"] == item)["evidence"]
    assert evidence[0]["rule"] == rule and evidence[0]["sources"]
    assert report["conclusion"]["stage"] == "user_side"
    assert report["conclusion"]["evidence"][0]["rule"] == "ST150"
    # the conclusion names the check that failed, once, in words
    st150 = [e["text"] for e in report["conclusion"]["evidence"] if e["rule"] == "ST150"]
    assert len(st150) == 1 and f"`{item}`" not in st150[0] and f"({item})" not in st150[0]
    assert st150[0].count(item_words(item, "fail", "en")) == 1


def test_every_item_is_reported_even_without_any_deploy_facts(tmp_path):
    root = tmp_path / "bare"
    root.mkdir()
    (root / "case.yaml").write_text(yaml.safe_dump({"stages": COMPILE_STAGES}))
    report = audit(root)
    assert [c["id"] for c in report["checklist"]][:5] == ["input_preprocessing", "layout",
                                                          "input_scale", "pre_post_nodes", "padding"]
    assert all(c["status"] == "unknown" and c["provide"] for c in report["checklist"])


def test_compile_triage_always_carries_the_checklist(tmp_path):
    folder = make_case(tmp_path / "t", MISTAKES["wrong_mode"])
    report = triage_case(load_case(folder), lang="zh", environ={}, installed={}, cwd=folder)
    assert len(report["checklist"]) == 14
    assert "### 部署清单" in render(report, "md")
    convert = tmp_path / "c"
    make_case(convert, stages={"qat_bc": {"status": "normal"}, "quantized_bc": {"status": "abnormal"}})
    assert triage_case(load_case(convert), environ={}, installed={}, cwd=convert)["checklist"] == []


def test_hb_compile_yaml_checks(tmp_path):
    folder = make_case(tmp_path / "y", None)
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "model_parameters": {"march": "nash-e"},
        "input_parameters": {"input_type_train": "rgb;yuv444", "input_type_rt": "nv12;rgb",
                             "input_source": "pyramid;ddr", "input_layout_train": "NCHW"},
        "compiler_parameters": {"core_num": 2}}))
    data = yaml.safe_load((folder / "case.yaml").read_text())
    data["deploy"]["config"] = "config.yaml"
    (folder / "case.yaml").write_text(yaml.safe_dump(data))
    got = statuses(audit(folder))
    assert got["input_type_pair"] == "fail"              # yuv444 -> rgb is illegal
    assert got["input_source"] == "pass"
    assert got["core_num"] == "fail"                     # nash-e has one core


def test_bad_compile_config_is_reported_not_raised(tmp_path):
    folder = make_case(tmp_path / "bad", None)
    (folder / "config.yaml").write_text("input_parameters: [unclosed\n")
    data = yaml.safe_load((folder / "case.yaml").read_text())
    data["deploy"]["config"] = "config.yaml"
    (folder / "case.yaml").write_text(yaml.safe_dump(data))
    report = audit(folder)
    problem = next(f for f in report["facts"] if f["type"] == "artifact_problem")
    assert problem["file"] == "config.yaml"


def test_audit_cli_markdown_and_json(tmp_path, capsys):
    folder = make_case(tmp_path / "cli", MISTAKES["missing_transpose"])
    assert main(["audit", str(folder), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Deployment checklist audit") and \
        "| The layout conversion does not fit the training and board layouts * | FAIL |" in out
    assert main(["audit", str(folder), "--format", "json", "--fail-on", "error"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {c["id"]: c["status"] for c in report["checklist"]}["layout"] == "fail"


def test_audit_html_escapes_user_text(tmp_path, capsys):
    folder = make_case(tmp_path / "h", MISTAKES["wrong_mode"], title="<img src=x onerror=alert(1)>")
    assert main(["audit", str(folder), "--format", "html", "--lang", "en"]) == 0
    page = capsys.readouterr().out
    assert "<img src=x" not in page and "&lt;img src=x" in page
    assert "<table class=\"checklist\">" in page and "FAIL" in page
