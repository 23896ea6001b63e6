"""Values a Python caller can give the API that no case.yaml or JSON report holds: each is
taken as the plain value it stands for (a str Enum's member, a str subclass) or refused
with one error naming its key and what is expected, never Python's own error. A case is
never saved over a FIFO, device or socket, nor blocks reading one; an artifact holding a
number too long for Python to read is the case's own named problem."""

from __future__ import annotations

import enum
import math
import os
import socket
import threading
from pathlib import Path

import pytest
import yaml

import qcdoctor
from tests.qa.fix_trials import PROBE, build_fix_case, fix_doc

LONG = 10 ** 5000                   # more digits than Python converts to text (4,300)


class Chip(str, enum.Enum):
    J6E = "J6E"


class Stage(str, enum.Enum):
    QAT_BC = "qat_bc"


class Word(str):
    """A str subclass, as a library's string type may be."""


def _looped() -> list:
    loop: list = []
    loop.append(loop)
    return loop


def _deep(levels: int = 3000, leaf=None) -> list:
    """A list nested ``levels`` deep, built without recursion."""
    top = inner = []
    for _ in range(levels - 1):
        inner.append([])
        inner = inner[0]
    if leaf is not None:
        inner.append(leaf)
    return top


# --- str subclasses are their text ---------------------------------------------------

def test_str_enum_members_and_str_subclasses_are_their_text(tmp_path):
    case = qcdoctor.Case(chip=Chip.J6E, title=Word("drop"), metric=Word("mAP"),
                         evidence=[Word("dataset_eval")], stages={Stage.QAT_BC: 0.449})
    case.stage(Stage.QAT_BC, 0.447).stage(Word("quantized_bc"), 0.391)
    assert case.data["platform"] == {"chip": "J6E"}
    assert case.data["stages"]["qat_bc"] == {"metric": "mAP", "value": 0.447}
    text = case.to_yaml()
    assert "!!" not in text and "python" not in text       # plain YAML text, no tags
    assert yaml.safe_load(text)["platform"]["chip"] == "J6E"
    saved = case.save(tmp_path / "c")
    assert qcdoctor.triage(saved, lang="en").to_dict()["conclusion"] == \
        case.triage(lang="en").to_dict()["conclusion"]


# --- values a case does not hold: one CaseError naming the key -----------------------

HOSTILE_CASES = [
    ("a list holding itself", lambda: qcdoctor.Case(evidence=_looped()),
     "evidence[0]", "holds itself"),
    ("3000 levels deep", lambda: qcdoctor.Case(deploy={"train": {"mean": _deep()}}),
     "deploy.train.mean[0]", "nested more than 32 levels"),
    ("a 5000-digit number", lambda: qcdoctor.Case(stages={"qat_bc": LONG}),
     "stages.qat_bc", "5,001 digits, too large"),
    ("a 5000-digit level", lambda: qcdoctor.Case(consistency_level=-LONG),
     "consistency_level", "too large"),
    ("a list as a stage id", lambda: qcdoctor.Case().stage(["qat_bc"], 0.4),
     "stages", "a stage id is text"),
    ("a dict as a stage id", lambda: qcdoctor.Case().stage({"a": 1}, 0.4),
     "stages", "a stage id is text"),
    ("bytes", lambda: qcdoctor.Case(title=b"drop"), "title", "found bytes"),
    ("a set", lambda: qcdoctor.Case(evidence={"dataset_eval"}), "evidence", "found set"),
    ("a tuple as a key", lambda: qcdoctor.Case(stages={("qat_bc",): 0.4}),
     "stages", "the key ('qat_bc',) is not text"),
    ("bytes as a key", lambda: qcdoctor.Case(user_checks={b"same_march": True}),
     "user_checks", "is not text"),
    ("NaN", lambda: qcdoctor.Case(stages={"qat_bc": math.nan}),
     "stages.qat_bc.value", "not a finite number"),
    ("infinity", lambda: qcdoctor.Case(tolerance={"abs": math.inf}),
     "tolerance.abs", "not a finite number"),
    ("a boolean as a level", lambda: qcdoctor.Case(consistency_level=True),
     "consistency_level", "boolean"),
    ("a boolean as a stage value", lambda: qcdoctor.Case(metric="mAP").stage("qat", True),
     "stages.qat.value", "boolean"),
    ("a list as the metric", lambda: qcdoctor.Case(metric=["mAP"], stages={"qat": 0.4}),
     "metric", "metric's name as text"),
    ("a set in update", lambda: qcdoctor.Case().update(platform={"J6E"}), "platform",
     "found set"),
    ("a deep out_dir", lambda: qcdoctor.Case().add_quant_analysis(
        _deep(40), baseline="qat_bc", analysis="quantized_bc"), "analyses_run[0].out_dir",
     "nested more than"),
]


@pytest.mark.parametrize("make,key,words", [c[1:] for c in HOSTILE_CASES],
                         ids=[c[0] for c in HOSTILE_CASES])
def test_a_value_no_case_holds_is_one_case_error(make, key, words):
    with pytest.raises(qcdoctor.CaseError) as caught:
        make()
    assert caught.value.key.startswith(key)        # the deep ones: the level past the limit
    assert words in str(caught.value) and caught.value.fix


def test_a_refused_update_leaves_the_case_as_it_was():
    case = qcdoctor.Case(chip="J6E", stages={"qat_bc": 0.449})
    before = case.to_yaml()
    for values in ({"stages": {"qat": LONG}}, {"evidence": _looped()},
                   {"title": b"x", "retrain": "yes"}):
        with pytest.raises(qcdoctor.CaseError):
            case.update(**values)
        assert case.to_yaml() == before


def test_path_arguments_that_name_no_path_are_clear_errors():
    for call, key in ((lambda: qcdoctor.triage(5), "path"),
                      (lambda: qcdoctor.Case(folder=["c"]), "folder"),
                      (lambda: qcdoctor.Case().save(b"c"), "folder"),
                      (lambda: qcdoctor.triage(example="board_only", allow_outside=3.5),
                       "allow_outside"),
                      (lambda: qcdoctor.triage(example=LONG), "example"),
                      (lambda: qcdoctor.triage(example="board_only", lang=_looped()), "lang")):
        with pytest.raises(qcdoctor.QcdoctorError) as caught:
            call()
        assert caught.value.key == key and caught.value.fix


# --- Report.from_dict ---------------------------------------------------------------

@pytest.fixture(scope="module")
def report_dict() -> dict:
    return qcdoctor.triage(example="board_only", lang="en").to_dict()


def _changed(data: dict, path: tuple, value) -> dict:
    import copy
    data = copy.deepcopy(data)
    inner = data
    for name in path[:-1]:
        inner = inner[name]
    inner[path[-1]] = value
    return data


HOSTILE_REPORTS = [
    ("a set", ("findings",), {1, 2}, "findings", "found set"),
    ("bytes", ("case", "title"), b"t", "case.title", "found bytes"),
    ("a tuple key", ("case", ("a", "b")), "x", "case", "is not text"),
    ("a self-reference", ("facts",), _looped(), "facts[0]", "holds itself"),
    ("3000 levels deep", ("trace",), _deep(), "trace[0]", "nested more than 32 levels"),
    ("a 5000-digit number", ("consistency", "level"), LONG, "consistency.level",
     "too large for any number"),
    ("an object", ("conclusion", "suspect"), object(), "conclusion.suspect", "found object"),
]


@pytest.mark.parametrize("path,value,key,words", [c[1:] for c in HOSTILE_REPORTS],
                         ids=[c[0] for c in HOSTILE_REPORTS])
def test_a_value_no_report_holds_is_one_error(report_dict, path, value, key, words):
    with pytest.raises(qcdoctor.QcdoctorError) as caught:
        qcdoctor.Report.from_dict(_changed(report_dict, path, value))
    assert caught.value.key.startswith(key) and words in caught.value.problem
    assert caught.value.fix


def test_a_report_of_str_subclasses_reads_as_its_text(report_dict):
    data = _changed(report_dict, ("language",), Word("en"))
    data = _changed(data, ("conclusion", "stage"), Word(report_dict["conclusion"]["stage"]))
    again = qcdoctor.Report.from_dict(data)
    assert type(again.language) is str and again.to_dict() == report_dict


# --- Case.save and what is already there ---------------------------------------------

def _save_in_thread(case, folder: Path, **options) -> list:
    """``case.save(folder)`` in a thread that may not block: a FIFO it opened is given an
    end (a writer that closes) if it is still waiting after a while, and the test fails."""
    outcome: list = []

    def save():
        try:
            outcome.append(case.save(folder, **options))
        except BaseException as exc:  # noqa: BLE001 - the outcome is what is judged
            outcome.append(exc)
    thread = threading.Thread(target=save, daemon=True)
    thread.start()
    thread.join(timeout=20)
    if thread.is_alive():
        fd = os.open(folder / "case.yaml", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)                # the reader sees an end, and the thread can finish
        thread.join(timeout=20)
        pytest.fail("Case.save blocked on a FIFO")
    return outcome


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_fifo_is_neither_read_nor_replaced(tmp_path, overwrite):
    folder = tmp_path / "c"
    folder.mkdir()
    os.mkfifo(folder / "case.yaml")
    (outcome,) = _save_in_thread(qcdoctor.Case(chip="J6E"), folder, overwrite=overwrite)
    assert isinstance(outcome, qcdoctor.QcdoctorError), outcome
    assert outcome.file == str(folder / "case.yaml") and "a FIFO" in outcome.problem
    assert "another folder" in outcome.fix
    assert (folder / "case.yaml").is_fifo()


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_to_a_device_is_not_read(tmp_path, overwrite):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "case.yaml").symlink_to("/dev/zero")
    (outcome,) = _save_in_thread(qcdoctor.Case(chip="J6E"), folder, overwrite=overwrite)
    assert isinstance(outcome, qcdoctor.QcdoctorError), outcome
    assert outcome.file == str(folder / "case.yaml") and outcome.fix
    assert os.readlink(folder / "case.yaml") == "/dev/zero"


def test_a_socket_or_a_folder_is_not_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                 # a socket's path must be short
    Path("s").mkdir()
    listening = socket.socket(socket.AF_UNIX)
    try:
        listening.bind("s/case.yaml")
        with pytest.raises(qcdoctor.QcdoctorError, match="a socket, not a file"):
            qcdoctor.Case(chip="J6E").save("s", overwrite=True)
    finally:
        listening.close()
    (tmp_path / "f" / "case.yaml").mkdir(parents=True)
    with pytest.raises(qcdoctor.QcdoctorError, match="a folder, not a file"):
        qcdoctor.Case(chip="J6E").save("f", overwrite=True)


def test_a_regular_case_file_is_still_compared_and_kept(tmp_path):
    case = qcdoctor.Case(chip="J6E")
    saved = case.save(tmp_path / "c")
    assert case.save(tmp_path / "c") == saved               # the same text: nothing to do
    with pytest.raises(qcdoctor.QcdoctorError, match="already there: it is kept"):
        qcdoctor.Case(chip="J6M").save(tmp_path / "c")
    assert "J6E" in saved.read_text(encoding="utf-8")


# --- fix_trials.yaml with a number too long for Python -------------------------------

def test_a_5000_digit_number_in_fix_trials_is_a_named_artifact_problem(tmp_path):
    text = yaml.safe_dump(fix_doc("single"), sort_keys=False).replace(
        "forwards: 9", f"forwards: {'7' * 5000}")
    folder = build_fix_case(tmp_path, "single", text=text)
    report = qcdoctor.triage(folder, lang="en")
    data = report.to_dict()
    problems = [f for f in data["facts"] if f["type"] == "artifact_problem"
                and f["file"] == f"{PROBE}/fix_trials.yaml"]
    assert [p["problem"] for p in problems] == \
        ["forwards: a number of 5000 digits, too large for any number"]
    assert problems[0]["problem_zh"] == "forwards：一个 5000 位的数，大到任何数值类型都放不下"
    assert "int_max_str_digits" not in report.to_json()
    assert not [f for f in data["facts"] if f["type"] == "fix_trials"]
