"""qcdoctor.Case: the arguments become case.yaml's keys and pass the case file's own
checks (a CaseError naming the key, the problem and the fix, with the nearest allowed
word), the case triages without a file, and a saved case triages to the same report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import qcdoctor
from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import copy_example
from tests.api.helpers import cli_json
from tests.paths import REPO

NUMBERS = dict(chip="J6E", metric="mAP", evidence=["dataset_eval"],
               stages={"qat": 0.449, "qat_bc": 0.447, "quantized_bc": 0.391})


def test_the_arguments_are_the_case_files_keys():
    case = qcdoctor.Case(**NUMBERS, title="BEV det", retrain=False, consistency_level=1,
                         versions={"hbdk4-compiler": "4.10"},
                         user_checks={"same_march": True}, tolerance={"abs": 0.005})
    data = case.data
    assert data["platform"] == {"chip": "J6E"}
    assert data["stages"]["qat"] == {"metric": "mAP", "value": 0.449}
    assert data["retrain"] == "no" and data["user_checks"] == {"same_march": "yes"}
    assert data["versions"]["hbdk4-compiler"] == "4.10"        # a version, not the number 4.1
    assert data["tolerance"] == {"abs": 0.005} and data["consistency_level"] == 1
    # the text is a case.yaml the file reader takes as it is
    read = load_case_text(case.to_yaml())
    assert read == data


def load_case_text(text: str) -> dict:
    from qcdoctor.collectors.case_file import parse_case
    return parse_case(text, None, None).data


def test_stage_results_come_as_numbers_statuses_or_mappings():
    import numpy
    case = qcdoctor.Case(metric="NDS", stages={"qat": numpy.float32(0.5), "qat_bc": None,
                                               "hbm_x86": "abnormal",
                                               "quantized_bc": {"value": 0.4}})
    case.stage("board", 0.3).stage("float", 0.52, metric="mAP").stage("calib", status="normal")
    stages = case.data["stages"]
    assert stages["qat"] == {"metric": "NDS", "value": 0.5}
    assert "qat_bc" not in stages
    assert stages["hbm_x86"] == {"status": "abnormal"}
    assert stages["quantized_bc"] == {"metric": "NDS", "value": 0.4}
    assert stages["board"] == {"metric": "NDS", "value": 0.3}
    assert stages["float"] == {"metric": "mAP", "value": 0.52}
    assert stages["calib"] == {"status": "normal"}


def test_a_quant_analysis_run_is_an_analyses_run_entry():
    case = qcdoctor.Case(**NUMBERS).add_quant_analysis(
        Path("qa_convert"), baseline="qat_bc", analysis="quantized_bc", sensitivity=True)
    assert case.data["analyses_run"] == [{"baseline": "qat_bc", "analysis": "quantized_bc",
                                          "out_dir": "qa_convert", "sensitivity": True}]


# (arguments, the key named, words of the problem, words of the fix)
MISTAKES = [
    (dict(stages={"qatt": 0.4}), "stages.qatt", "unknown key", "did you mean 'qat'?"),
    (dict(stages={"qat_bc": "abnormall"}), "stages.qat_bc.status", "'abnormall' is not allowed",
     "did you mean 'abnormal'?"),
    (dict(stages={"qat": {"metirc": "mAP", "value": 0.4}}), "stages.qat.metirc",
     "unknown key", "did you mean 'metric'?"),
    (dict(stages={"qat": {"metric": "mAP", "value": "0.4x"}}), "stages.qat.value",
     "expected a number", "0.449"),
    (dict(stages={"qat": True}), "stages.qat", "boolean", "0.449"),
    (dict(stages={"qat": [0.4]}), "stages.qat", "list", "0.449"),
    (dict(stages={"qat": float("nan")}), "stages.qat.value", "not a finite number",
     "measured value"),
    (dict(chip="J6-E"), "platform.chip", "'J6-E' is not allowed", "did you mean 'J6E'?"),
    (dict(march="nash_e"), "platform.march", "not allowed", "did you mean 'nash-e'?"),
    (dict(chip="J6P", march="nash-e"), "platform", "does not run", "nash-e is J6E"),
    (dict(evidence="dataset"), "evidence", "not allowed", "did you mean 'dataset_eval'?"),
    (dict(deploy={"board": {"colour": "nv12"}}), "deploy.board.colour", "unknown key",
     "did you mean 'color'?"),
    (dict(consistency_level=7), "consistency_level", "above the maximum", "0 to 4"),
    (dict(analyses_run=[{"type": "convert", "baseline": "qat_bc"}]), "analyses_run[0]",
     "no 'analysis'", "baseline"),
    (dict(user_checks={"same_marhc": True}), "user_checks.same_marhc", "unknown key",
     "did you mean 'same_march'?"),
    (dict(thresholds={"cosine_good": object()}), "thresholds.cosine_good", "object",
     "numbers"),
    (dict(chip="J6E", platform={"chip": "J6M"}), "platform.chip", "given twice", "once"),
]


@pytest.mark.parametrize("arguments, key, problem, fix", MISTAKES,
                         ids=[m[1] for m in MISTAKES])
def test_a_mistake_is_a_case_error_naming_the_key(arguments, key, problem, fix):
    with pytest.raises(qcdoctor.CaseError) as caught:
        qcdoctor.Case(**arguments)
    error = caught.value
    assert isinstance(error, qcdoctor.QcdoctorError)
    assert error.key == key and problem in error.problem and fix in error.fix
    # a document the API made: no file or line the user never saw
    assert error.file is None and error.line is None
    assert str(error).startswith(f"'{key}': ")
    # raised from the API's own code, nothing of the reader's chained to it
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    innermost = error.__traceback__
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
    assert Path(innermost.tb_frame.f_code.co_filename).parent.name == "api"


def test_a_mistake_leaves_the_case_as_it_was():
    case = qcdoctor.Case(**NUMBERS)
    before = case.to_yaml()
    for change in (lambda: case.stage("boardd", 0.3), lambda: case.stage("board"),
                   lambda: case.update(retrain="maybe"), lambda: case.update(chipp="J6M"),
                   lambda: case.add_quant_analysis("qa", baseline="qat_bc", analysis="bc")):
        with pytest.raises(qcdoctor.CaseError):
            change()
        assert case.to_yaml() == before
    with pytest.raises(qcdoctor.CaseError, match="did you mean 'chip'"):
        case.update(chipp="J6M")
    with pytest.raises(qcdoctor.CaseError, match=r"stages\.boardd.*\n.*did you mean 'board'"):
        case.stage("boardd", 0.3)


def _keys_alone(text: str) -> str:
    """A report's JSON with its case.yaml citations as a case built in Python has them:
    the key alone, no file, no line."""
    import re
    text = re.sub(r"case\.yaml(?::\d+)? \(([^()\"]+)\)", r"\1", text)
    return re.sub(r'\{"file": "case\.yaml", "line": (?:\d+|null)\}(, )?', "", text)


def test_a_saved_case_triages_to_the_same_report(tmp_path):
    case = qcdoctor.Case(**NUMBERS, language="en")
    case.stage("board", 0.30)
    case.add_quant_analysis("qa_convert", baseline="qat_bc", analysis="quantized_bc")
    report = case.triage()
    path = case.save(tmp_path / "case_dir")
    assert path == tmp_path / "case_dir" / "case.yaml"
    assert path.read_text(encoding="utf-8") == case.to_yaml()
    saved = qcdoctor.triage(tmp_path / "case_dir").to_dict()
    made = report.to_dict()
    # with no folder of its own the case is named as built in Python and cites its keys
    # alone (no file line: there is no file); everything else is the same, the folder it
    # names as missing included
    assert made["case"]["path"] == "qcdoctor.Case(...)"
    assert saved["case"]["path"] == str(tmp_path / "case_dir")
    made["case"]["path"] = saved["case"]["path"]
    made_text = json.dumps(made)
    assert "case.yaml:" not in made_text and "stages.board" in made_text
    assert json.loads(_keys_alone(json.dumps(saved))) == made
    assert any(f["type"] == "analysis_absent" for f in made["facts"])
    assert "qcdoctor-case-" not in json.dumps(report.to_dict())      # its temporary folder
    # and from the command line, in the other language
    assert report.in_language("zh").to_dict()["conclusion"] == cli_json(
        tmp_path / "r.json", "triage", str(tmp_path / "case_dir"), "--lang", "zh")["conclusion"]


def test_a_case_with_its_folder_reads_its_artifacts_and_saves_there(tmp_path):
    folder = copy_example("convert_quant_analysis", str(tmp_path / "qa_case"))
    (folder / "case.yaml").unlink()
    case = qcdoctor.Case(chip="J6P", metric="mAP", evidence="dataset_eval",
                         stages={"qat_bc": 0.574, "quantized_bc": 0.512}, folder=folder)
    case.add_quant_analysis("qa_convert", baseline="qat_bc", analysis="quantized_bc",
                            sensitivity=True)
    report = case.triage(lang="en")
    assert {"LY010", "LY030"} <= {f.rule for f in report.findings}     # the tables were read
    assert case.save() == folder / "case.yaml"
    assert qcdoctor.triage(folder, lang="en").to_dict() == report.to_dict()
    assert report.case_path == str(folder)


def test_saving_keeps_a_different_case_file_unless_told(tmp_path):
    case = qcdoctor.Case(**NUMBERS)
    target = tmp_path / "c"
    target.mkdir()
    (target / "case.yaml").write_text("schema: qcdoctor/case-v1\n", encoding="utf-8")
    with pytest.raises(qcdoctor.QcdoctorError, match="different case.yaml") as caught:
        case.save(target)
    assert caught.value.file == str(target / "case.yaml") and "overwrite=True" in caught.value.fix
    assert (target / "case.yaml").read_text(encoding="utf-8") == "schema: qcdoctor/case-v1\n"
    case.save(target, overwrite=True)
    assert load_case(target).data == case.data
    mode = (target / "case.yaml").stat().st_mode
    assert case.save(target) == target / "case.yaml"            # the same text: nothing to do
    assert (target / "case.yaml").stat().st_mode == mode
    assert sorted(p.name for p in target.iterdir()) == ["case.yaml"]   # no temporary left


def test_saving_refuses_a_link_and_a_case_without_folder(tmp_path):
    (tmp_path / "real.yaml").write_text("x", encoding="utf-8")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "case.yaml").symlink_to(tmp_path / "real.yaml")
    with pytest.raises(qcdoctor.QcdoctorError, match="symlink"):
        qcdoctor.Case(**NUMBERS).save(linked, overwrite=True)
    assert (tmp_path / "real.yaml").read_text(encoding="utf-8") == "x"
    with pytest.raises(qcdoctor.CaseError, match="no folder") as caught:
        qcdoctor.Case(**NUMBERS).save()
    assert caught.value.key == "folder"
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    with pytest.raises(qcdoctor.QcdoctorError):
        qcdoctor.Case(**NUMBERS).save(blocked / "sub")


def test_a_case_names_a_folder_that_exists(tmp_path):
    case = qcdoctor.Case(**NUMBERS, folder=tmp_path / "later")
    with pytest.raises(qcdoctor.CaseError, match="no such folder"):
        case.triage()
    case.save()
    assert case.triage(lang="en").conclusion.stage == "convert"


def test_a_loaded_case_is_the_files(tmp_path):
    folder = copy_example("convert_j6p", str(tmp_path / "c"))
    case = qcdoctor.Case.load(folder)
    assert case.folder == folder and case.data == load_case(folder).data
    case.stage("board", status="abnormal")
    assert case.triage(lang="en").to_dict()["conclusion"]["stage"] == \
        qcdoctor.triage(folder, lang="en").conclusion.stage
    with pytest.raises(qcdoctor.CaseError) as caught:
        qcdoctor.Case.load(tmp_path / "nowhere")
    assert caught.value.file == str(tmp_path / "nowhere")


def test_a_broken_case_file_is_a_case_error_with_its_line(tmp_path):
    (tmp_path / "case.yaml").write_text("schema: qcdoctor/case-v1\nplatform: {chip: J6X}\n",
                                        encoding="utf-8")
    with pytest.raises(qcdoctor.CaseError) as caught:
        qcdoctor.triage(tmp_path)
    error = caught.value
    assert (error.file, error.line, error.key) == (str(tmp_path / "case.yaml"), 2,
                                                   "platform.chip")
    assert "J6X" in error.problem and "use one of" in error.fix


def test_equal_cases_and_their_text():
    one, two = qcdoctor.Case(**NUMBERS), qcdoctor.Case(**NUMBERS)
    assert one == two and repr(one).startswith("qcdoctor.Case(data=")
    two.stage("board", 0.3)
    assert one != two
    assert two.to_yaml().startswith("# qcdoctor case file")
    assert "  board: {metric: mAP, value: 0.3}\n" in two.to_yaml()
    with pytest.raises(TypeError):
        hash(one)
    assert qcdoctor.triage(one, lang="en").to_dict() == one.triage(lang="en").to_dict()


def test_an_error_never_names_a_built_cases_temporary_folder(monkeypatch):
    from qcdoctor.collectors import case_facts

    def failing(case, **options):
        raise qcdoctor.QcdoctorError("cannot read", file=str(case.folder / "deploy.py"),
                                     line=3)
    monkeypatch.setattr(case_facts, "collect_case", failing)
    with pytest.raises(qcdoctor.QcdoctorError) as caught:
        qcdoctor.Case(**NUMBERS).triage()
    assert caught.value.file is None and str(caught.value) == "cannot read"


def test_every_case_file_key_is_an_argument_and_documented():
    import inspect

    from qcdoctor.collectors.case_file import CASE_SCHEMA
    arguments = set(inspect.signature(qcdoctor.Case).parameters)
    assert set(CASE_SCHEMA.fields) - {"schema"} <= arguments
    assert arguments - set(CASE_SCHEMA.fields) == {"chip", "march", "metric", "folder"}
    guide = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
    assert not [a for a in arguments if f"`{a}`" not in guide and f"`{a}=" not in guide]


def test_every_wrong_value_is_named_at_once():
    """As with a case.yaml, all the problems in one error: each with its key and the
    nearest allowed word, each a CaseError of its own."""
    with pytest.raises(qcdoctor.CaseError) as caught:
        qcdoctor.Case(chip="J6X", metric="mAP", stages={"qat_bcc": 0.4})
    problems = caught.value.problems
    assert [(p.key, type(p)) for p in problems] == [("platform.chip", qcdoctor.CaseError),
                                                    ("stages.qat_bcc", qcdoctor.CaseError)]
    text = str(caught.value)
    assert text.startswith("2 problems:") and "did you mean 'J6P'" in text \
        and "did you mean 'qat_bc'" in text
