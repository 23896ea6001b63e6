"""hb_compile / hb_mapper configs read as they are (knowledge.md R5.9): the normalisation
map, per-input ';' lists, the colour, removed nodes, non-J6 marches, and configs and
scripts found in the case folder; each case through triage_path in every format."""

from __future__ import annotations

import json

import pytest
import yaml

from qcdoctor.collectors.hb_compile_yaml import read_hb_compile, split_inputs
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render_output
from qcdoctor.engine.reports.schema import check_report
from tests.deploy.configs import hb_compile, write_case
from tests.deploy.scripts import CORRECT

RGB_TRAIN = {"color": "rgb", "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}
FORMATS = ("md", "html", "json", "sarif", "junit")


def reports(folder) -> dict[str, dict]:
    """The full audit of ``folder`` in zh and en, every format rendered (none may fail),
    each report as the report schema declares it."""
    out = {}
    for lang in ("zh", "en"):
        report = triage_path(folder, lang=lang, environ={}, installed={}, cwd=folder,
                             full_checklist=True)
        check_report(json.loads(render_output(report, "json")), "report.json")
        for fmt in FORMATS:
            assert render_output(report, fmt, audit=True).strip()
        out[lang] = report
    return out


def item(report: dict, name: str) -> dict:
    return next(c for c in report["checklist"] if c["id"] == name)


def facts(report: dict, kind: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == kind]


def normalisation(report: dict) -> dict:
    return next(f for f in facts(report, "deploy_compare") if f["item"] == "normalisation")


def test_split_inputs_trailing_semicolon_adds_no_input():
    assert split_inputs("NCHW;") == ["NCHW"]
    assert split_inputs("a;;b;") == ["a", "", "b"]
    assert split_inputs(None) == []


def test_correct_mean_and_scale_config_passes_normalisation(tmp_path):
    folder = write_case(tmp_path / "ok", hb_compile(), train=RGB_TRAIN)
    got = reports(folder)
    for report in got.values():
        fact = normalisation(report)
        assert fact["equal"] == "yes", fact
        assert fact["board"] == ("(x - [123.675, 116.28, 103.53]) × "
                                 "[0.01712475, 0.017507, 0.01742919]")
        assert item(report, "input_preprocessing")["status"] != "fail"
    assert got["en"]["conclusion"]["stage"] != "user_side"


def test_a_real_difference_still_fails(tmp_path):
    folder = write_case(tmp_path / "bad", hb_compile(scale="0.0078125 0.0078125 0.0078125"),
                        train=RGB_TRAIN)
    report = reports(folder)["en"]
    assert normalisation(report)["equal"] == "no"
    assert item(report, "input_preprocessing")["status"] == "fail"


def test_data_scale_with_empty_mean(tmp_path):
    config = hb_compile(norm_type="data_scale", mean="''", scale="0.00392157")
    folder = write_case(tmp_path / "scale", config,
                        train={"color": "rgb", "mean": [0.0], "std": [1.0], "divisor": 255})
    read = read_hb_compile(folder / "deploy" / "hb_compile.yaml")
    assert read["inputs"][0]["mean_value"] is None
    report = reports(folder)["en"]
    assert normalisation(report)["equal"] == "yes"
    assert normalisation(report)["board"].startswith("(x - [0.0]) × [0.00392157]")


def test_multi_input_lists_and_input_source(tmp_path):
    config = hb_compile(mean=f"'{'123.675 116.28 103.53'};'", scale="'0.0171 0.0175 0.0174;'")
    config = config.replace("input_type_rt: 'nv12'", "input_type_rt: 'nv12;featuremap;'")
    config = config.replace("input_type_train: 'rgb'", "input_type_train: 'rgb;featuremap;'")
    config = config.replace("input_layout_train: 'NCHW;'", "input_layout_train: 'NCHW;NCHW;'\n"
                            "  input_source: 'pyramid;ddr;'")
    config = config.replace("norm_type: 'data_mean_and_scale'",
                            "norm_type: 'data_mean_and_scale;no_preprocess;'")
    folder = write_case(tmp_path / "multi", config, train=RGB_TRAIN)
    read = read_hb_compile(folder / "deploy" / "hb_compile.yaml")
    assert len(read["inputs"]) == 2
    assert [r["input_source"] for r in read["inputs"]] == ["pyramid", "ddr"]
    assert [r["norm_type"] for r in read["inputs"]] == ["data_mean_and_scale", "no_preprocess"]
    # one mean for two inputs (a trailing ';' adds none) applies to each; the second
    # input's no_preprocess leaves it out of the normalisation
    assert read["inputs"][1]["mean_value"] == "123.675 116.28 103.53"
    report = reports(folder)["en"]
    types = facts(report, "input_types")
    assert [(t["index"], t["input_source"]) for t in types] == [(0, "pyramid"), (1, "ddr")]
    assert item(report, "input_source")["status"] == "pass"
    assert facts(report, "deploy_config")[0]["inputs"] == 2


def test_removed_nodes_judge_pre_post_nodes(tmp_path):
    removed = '  remove_node_name: "/model.23/cv2.0/cv2.0.2/Conv;/model.23/cv3.0/cv3.0.2/Conv;"\n'
    folder = write_case(tmp_path / "rm", hb_compile(extra_model=removed), train=RGB_TRAIN)
    for lang, report in reports(folder).items():
        nodes = facts(report, "removed_nodes")
        assert nodes and nodes[0]["count"] == 2, nodes
        assert item(report, "pre_post_nodes")["status"] == "pass"
        evidence = " ".join(e["text"] for e in item(report, "pre_post_nodes")["evidence"])
        assert "/model.23/cv3.0/cv3.0.2/Conv" in evidence, (lang, evidence)


def test_removed_nodes_stop_asking_for_them(tmp_path):
    removed = '  remove_node_name: "/model.23/cv2.0/cv2.0.2/Conv;"\n'
    folder = write_case(tmp_path / "ask", hb_compile(extra_model=removed), train=RGB_TRAIN)
    data = yaml.safe_load((folder / "case.yaml").read_text())
    del data["deploy"]["postprocess_same"]
    (folder / "case.yaml").write_text(yaml.safe_dump(data))
    report = reports(folder)["en"]
    entry = item(report, "pre_post_nodes")
    assert entry["status"] == "unknown"
    assert "deploy.postprocess_same" in entry["provide"]
    assert entry["provide"].startswith("whether post-processing is identical")
    assert "remove_node_name" in entry["provide"]


def test_bgr_config_against_rgb_training_fails_colour(tmp_path):
    folder = write_case(tmp_path / "bgr", hb_compile(type_train="bgr"), train=RGB_TRAIN)
    for report in reports(folder).values():
        colour = [f for f in facts(report, "deploy_compare") if f["item"] == "color"]
        assert colour and colour[0]["equal"] == "no" and colour[0]["board"] == "bgr"
        assert item(report, "input_preprocessing")["status"] == "fail"


def test_colour_from_config_is_not_asked(tmp_path):
    train = {k: v for k, v in RGB_TRAIN.items() if k != "color"}
    folder = write_case(tmp_path / "nocolor", hb_compile(type_train="bgr"), train=train)
    report = reports(folder)["en"]
    assert item(report, "input_type_pair")["status"] == "pass"
    assert "deploy.train.color" not in json.dumps(item(report, "input_type_pair"))
    assert all(f["train"] == "bgr" for f in facts(report, "input_types") if f["index"] == 0)


def test_unit_scale_training_without_divisor_is_asked_not_failed(tmp_path):
    train = {"color": "rgb", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    folder = write_case(tmp_path / "unit", hb_compile(), train=train)
    for lang, report in reports(folder).items():
        fact = normalisation(report)
        assert fact["equal"] == "unknown" and fact["missing"] == "divisor"
        entry = item(report, "input_preprocessing")
        assert entry["status"] == "unknown"
        assert any("deploy.train.divisor" in e["text"] for e in entry["evidence"]), lang
    # given, the same values compare (0.485 * 255 = 123.675)
    case = (folder / "case.yaml").read_text().replace("color: rgb", "color: rgb\n    divisor: 255")
    (folder / "case.yaml").write_text(case)
    assert normalisation(reports(folder)["en"])["equal"] == "yes"


def test_bayes_e_is_said_to_be_outside_j6(tmp_path):
    folder = write_case(tmp_path / "x5", hb_compile(march="bayes-e"), train=RGB_TRAIN)
    got = reports(folder)
    config = facts(got["en"], "deploy_config")[0]
    assert (config["march"], config["chip"], config["j6"]) == ("bayes-e", "X5", "no")
    en = render_output(got["en"], "md", audit=True)
    zh = render_output(got["zh"], "md", audit=True)
    assert "outside J6" in en and "still apply" in en
    assert "J6 之外" in zh


def test_node_info_and_optimization_are_shown(tmp_path):
    model = ('  node_info: {"/model.0/conv/Conv": {"ON": "BPU", "InputType": "int16", '
             '"OutputType": "int16"}}\n')
    folder = write_case(tmp_path / "int16", hb_compile(
        extra_model=model, calibration="  optimization: set_all_nodes_int16\n"),
        train=RGB_TRAIN)
    report = reports(folder)["en"]
    config = facts(report, "deploy_config")[0]
    assert config["int16_nodes"] == 1 and "/model.0/conv/Conv: int16" in config["node_types"]
    assert config["optimization"] == "set_all_nodes_int16"
    assert "set_all_nodes_int16" in render_output(report, "md", audit=True)


def test_config_and_script_in_the_folder_are_found_and_said(tmp_path):
    folder = write_case(tmp_path / "found", hb_compile(type_train="bgr"), train=RGB_TRAIN,
                        script=CORRECT, name_config=False)
    got = reports(folder)
    found = {f["kind"]: f["file"] for f in facts(got["en"], "deploy_found")}
    assert found == {"config": "deploy/hb_compile.yaml", "script": "deploy/compile_model.py"}
    assert facts(got["en"], "deploy_script")                       # the script was read
    assert item(got["en"], "input_preprocessing")["status"] == "fail"   # the config too
    en = render_output(got["en"], "md", audit=True)
    assert "Found in the case folder: deploy/hb_compile.yaml" in en
    assert "Found in the case folder: deploy/compile_model.py" in en
    zh = render_output(got["zh"], "md", audit=True)
    assert "在案例目录中找到：deploy/hb_compile.yaml" in zh


def test_audit_command_reads_a_found_config(tmp_path, capsys):
    folder = write_case(tmp_path / "cli", hb_compile(march="bayes-e"), train=RGB_TRAIN,
                        name_config=False)
    assert main(["audit", str(folder), "--lang", "en", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert facts(report, "deploy_found")[0]["file"] == "deploy/hb_compile.yaml"
    assert facts(report, "deploy_config")[0]["j6"] == "no"


def test_named_config_wins_and_two_unnamed_candidates_are_named_not_read(tmp_path):
    folder = write_case(tmp_path / "two", hb_compile(type_train="bgr"), train=RGB_TRAIN,
                        config_name="deploy/a.yaml", name_config=False)
    (folder / "deploy" / "b.yaml").write_text(hb_compile(), encoding="utf-8")
    report = reports(folder)["en"]
    found = facts(report, "deploy_found")[0]
    assert found["file"] == "" and found["candidates"] == "deploy/a.yaml, deploy/b.yaml"
    assert not facts(report, "deploy_config")
    assert "name one as deploy.config" in render_output(report, "md", audit=True)
    # the one whose name says it is the config is read
    (folder / "deploy" / "b.yaml").rename(folder / "deploy" / "hb_mapper_config.yaml")
    found = facts(reports(folder)["en"], "deploy_found")[0]
    assert found["file"] == "deploy/hb_mapper_config.yaml"
    # named in case.yaml: no search at all
    data = yaml.safe_load((folder / "case.yaml").read_text())
    data["deploy"]["config"] = "deploy/a.yaml"
    (folder / "case.yaml").write_text(yaml.safe_dump(data))
    report = reports(folder)["en"]
    assert not facts(report, "deploy_found")
    assert facts(report, "deploy_config")


@pytest.mark.parametrize("march,chip", [("nash-e", "J6E"), ("nash-m", "J6M"), ("nash-p", "J6P"),
                                        ("nash-h", "J6H"), ("nash-b", "J6B"),
                                        ("bernoulli", "X3")])
def test_march_names(tmp_path, march, chip):
    path = tmp_path / "c.yaml"
    path.write_text(hb_compile(march=march))
    assert read_hb_compile(path)["chip"] == chip


def test_config_without_script_leaves_the_mode_check_aside(tmp_path):
    train = {k: v for k, v in RGB_TRAIN.items() if k != "color"}
    folder = write_case(tmp_path / "mode", hb_compile(), train=train)
    report = reports(folder)["en"]
    entry = item(report, "preprocess_mode")
    assert entry["status"] == "not_applicable" and "provide" not in entry


def test_triage_command_says_the_found_config(tmp_path, capsys):
    folder = write_case(tmp_path / "tri", hb_compile(), train=RGB_TRAIN, name_config=False)
    assert main(["triage", str(folder), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "Found in the case folder: deploy/hb_compile.yaml (read as the compile config" in out


def test_intake_reads_a_found_config_before_asking(tmp_path):
    from qcdoctor.collectors.files import CaseFiles
    from qcdoctor.engine.intake.deploy_known import known_answers
    folder = write_case(tmp_path / "intake", hb_compile(type_train="bgr"), train={},
                        name_config=False)
    known = known_answers(folder, {}, CaseFiles(folder))
    assert known["deploy.train.color"] == ("bgr", "deploy/hb_compile.yaml: input_type_train")
    assert known["deploy.train.layout"][0] == "NCHW"            # 'NCHW;': one input
