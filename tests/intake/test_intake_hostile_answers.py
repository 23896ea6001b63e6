"""Intake answers of any bytes and length, and an input or a disk that fails: a byte that
is not UTF-8 or an answer over the 10,000 characters a value holds is asked again (the
session goes on and saves), a closed or write-only standard input is one clear error, a
full disk or a file-size limit while saving says so with the answers so far (the earlier
case.yaml left as it was), and a number of hundreds of digits is never offered as inf."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qcdoctor.collectors import limits
from qcdoctor.engine.intake.prompts import LinePrompter
from qcdoctor.engine.intake.questions import AnswerError, all_question_keys, question_for_key
from qcdoctor.engine.intake.session import Intake
from qcdoctor.engine.intake.symptom_hints import stage_hints


def _intake(folder: Path, stdin: bytes, **options) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(folder), "--lang",
                           "en"], input=stdin, capture_output=True, timeout=120, **options)


def _symptom(folder: Path) -> str:
    from qcdoctor.collectors.case_file import load_case
    return load_case(folder / "case.yaml").get("symptom")


def test_a_symptom_that_is_not_utf8_is_asked_again(tmp_path):
    done = _intake(tmp_path / "case", b"mAP drops \xff\xfe after convert\n"
                                      b"mAP drops after convert\n")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert b"not UTF-8 text" in done.stdout
    assert _symptom(tmp_path / "case") == "mAP drops after convert"


def test_a_symptom_over_the_value_limit_is_asked_again(tmp_path):
    long = b"a" * (limits.TEXT_CHARS + 1)
    done = _intake(tmp_path / "case", long + b"\nmAP drops after convert\n")
    assert done.returncode == 0, done.stderr.decode()
    assert b"10,001 characters" in done.stdout
    assert _symptom(tmp_path / "case") == "mAP drops after convert"


@pytest.mark.parametrize("how", ["closed", "write_only"])
def test_an_input_that_cannot_be_read_is_one_clear_error(tmp_path, how):
    if how == "closed":
        done = subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(tmp_path / "c")],
                              capture_output=False, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=120,
                              preexec_fn=lambda: os.close(0))
    else:
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "qcdoctor", "intake",
                                   str(tmp_path / "c")], stdin=full, capture_output=True,
                                  timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 2 and "standard input is closed or not readable" in err, err
    assert "internal error" not in err and "Traceback" not in err


def _no_file_writes():
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_file_size_limit_while_saving_keeps_the_answers_and_the_earlier_file(tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    earlier = "schema: qcdoctor/case-v1\nlanguage: en\ntitle: mine\n"
    (folder / "case.yaml").write_text(earlier, encoding="utf-8")
    done = _intake(folder, b"mAP drops after convert\n", preexec_fn=_no_file_writes)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "cannot save case.yaml" in err and "internal error" not in err
    assert "mAP drops after convert" in err              # the answers so far, not lost
    assert (folder / "case.yaml").read_text(encoding="utf-8") == earlier


def test_hundreds_of_digits_in_the_symptom_give_no_stage_value():
    values, _ = stage_hints("mAP on qat.bc is " + "4" * 400 + " and on quantized.bc is 0.391")
    assert all(v == v and abs(v) != float("inf") for v in values.values())
    assert values.get("quantized_bc") in (None, 0.391)


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=0, max_size=200) | st.binary(max_size=200).map(
    lambda b: b.decode("utf-8", "surrogateescape")))
def test_any_answer_to_any_question_is_a_value_or_a_reason(text):
    for key in sorted(k for k in all_question_keys() if "{" not in k):
        question = question_for_key(key)
        try:
            value = question.parse(text)
        except AnswerError as refused:
            assert str(refused)
            continue
        rendered = str(value)
        assert not any("\ud800" <= c <= "\udfff" for c in rendered)


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_a_piped_session_of_any_bytes_saves_a_case_that_loads(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("any") / "case"
    stdin = io.TextIOWrapper(io.BytesIO(data + b"\n"), encoding="utf-8",
                             errors="surrogateescape")
    out = io.StringIO()
    Intake(folder, LinePrompter(stdin=stdin, stdout=out), lang="en", environ={},
           installed={}).run()
    assert (folder / "case.yaml").is_file()
    _symptom(folder)                              # loads: whatever was typed


def test_the_rules_run_where_no_temporary_file_can_be_written():
    """The rule engine's worker keeps its last words in a temporary file; where none can be
    written (ulimit -f 0, a full disk) the rules still run and the report prints."""
    done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", "--example",
                           "convert_j6e_no_retrain", "--lang", "en", "--format", "md"],
                          capture_output=True, timeout=120, preexec_fn=_no_file_writes)
    assert done.returncode == 0, done.stderr.decode()
    assert b"convert" in done.stdout
