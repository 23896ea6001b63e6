"""Small hostile inputs: each gets a clear message or a correct reading, fast and quiet."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.dumps import compare, open_dump
from qcdoctor.collectors.hb_compile_yaml import read_hb_compile
from qcdoctor.collectors.model_check import check_model
from qcdoctor.collectors.versions import VERSION_RE
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.intake.questions import AnswerError, Question
from qcdoctor.errors import QcdoctorError
from tests.qa.scenarios import build

# the former version pattern, kept here to show the new one accepts the same strings
OLD_VERSION = re.compile(r"^\d+(\.\d+)*([.+\-]?[0-9A-Za-z][0-9A-Za-z.+\-]*)?$")


def test_answers_file_that_is_not_utf8(tmp_path, capsys):
    answers = tmp_path / "answers.yaml"
    answers.write_bytes(b"platform.chip: J6E\nretrain: \xff\xfe\n")
    assert main(["intake", str(tmp_path / "case"), "--answers", str(answers)]) == 2
    err = capsys.readouterr().err
    assert f"{answers}:2: not UTF-8 text" in err and "save the answers file as UTF-8" in err
    assert "internal error" not in err


def test_version_check_is_linear_on_a_90_kb_value():
    hostile = "1." + "11." * 30000 + "!"                  # 90 KB: over a minute before
    started = time.perf_counter()
    assert VERSION_RE.match(hostile) is None
    assert VERSION_RE.match(hostile[:-1] + "1")            # the same without the bad end
    elapsed = time.perf_counter() - started
    print(f"version check of {len(hostile)} characters: {elapsed * 1000:.2f} ms")
    assert elapsed < 0.5


@given(st.text(alphabet="0123456789.+-abZ!", max_size=12))
def test_version_pattern_accepts_what_it_did(text):
    assert bool(VERSION_RE.match(text)) == bool(OLD_VERSION.match(text))


def test_a_2_mb_bad_value_gives_a_short_message(tmp_path, capsys):
    value = "1." * 1_000_000 + "!"
    (tmp_path / "case.yaml").write_text(
        f'schema: qcdoctor/case-v1\nversions: {{hbdk4-compiler: "{value}"}}\n', encoding="utf-8")
    started = time.perf_counter()
    assert main(["triage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    print(f"2 MB bad version: {len(err)} characters of message, "
          f"{time.perf_counter() - started:.2f} s")
    assert len(err) < 1000 and str(tmp_path / "case.yaml") in err   # refused by its size
    # a long value within the size limits reaches the version check: cut in the message
    value = "1." * 4_000 + "!"
    (tmp_path / "case.yaml").write_text(
        f'schema: qcdoctor/case-v1\nversions: {{hbdk4-compiler: "{value}"}}\n', encoding="utf-8")
    assert main(["triage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err) < 1000
    assert f"{tmp_path / 'case.yaml'}:2: 'versions.hbdk4-compiler':" in err
    assert "characters left out" in err and err.rstrip().endswith("e.g. 4.4.1")
    assert "is not a version" in err


def test_every_part_of_an_error_is_cut():
    exc = QcdoctorError("p" * 5000, file="f.yaml", key="k" * 5000, fix="x" * 5000)
    # three parts of about 300 characters, the fix (our wording) of about 600
    assert len(exc.render()) < 1400 and len(exc.fix) < 650
    assert exc.problem.startswith("p" * 200) and exc.problem.endswith("p" * 100)


def _huge(tmp_path: Path, sign: float) -> Path:
    path = tmp_path / f"out{'+' if sign > 0 else '-'}.npy"
    np.save(path, np.full(3000, sign * 3e38, dtype=np.float32))
    return path


def test_dumps_near_the_float32_limit_compare_right_and_quietly(tmp_path):
    a, b = open_dump(_huge(tmp_path, 1)), open_dump(_huge(tmp_path, -1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # any RuntimeWarning fails here
        opposite = compare(a, b)
        same = compare(a, open_dump(_huge(tmp_path, 1)))
    assert opposite["cosine"] == -1.0 and opposite["max_abs"] == pytest.approx(6e38, rel=1e-6)
    assert same["cosine"] == 1.0 and same["identical"]


def test_no_numpy_warning_reaches_stderr(tmp_path):
    case = tmp_path / "case"
    (case / "a").mkdir(parents=True)
    (case / "b").mkdir()
    np.save(case / "a" / "out.npy", np.full(100, 3e38, dtype=np.float32))
    np.save(case / "b" / "out.npy", np.full(100, -3e38, dtype=np.float32))
    (case / "case.yaml").write_text("schema: qcdoctor/case-v1\n"
                                    "artifacts: {dumps: {hbm_x86: a, board: b}}\n", encoding="utf-8")
    for command in (["triage", str(case)], ["compare", str(case / "a"), str(case / "b")]):
        result = subprocess.run([sys.executable, "-m", "qcdoctor", *command], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "Warning" not in result.stderr, result.stderr


def test_unicode_digits_are_not_numbers(tmp_path):
    config = tmp_path / "hb.yaml"
    config.write_text("compiler_parameters: {core_num: ²}\nmodel_parameters: {march: nash-e}\n",
                      encoding="utf-8")
    assert read_hb_compile(config)["core_num"] is None
    config.write_text("compiler_parameters: {core_num: '2'}\n", encoding="utf-8")
    assert read_hb_compile(config)["core_num"] == 2
    check = tmp_path / "model_check_result.txt"
    check.write_text("Each module called times:\nname    called times\n------  ------------\n"
                     "head.a  ²\nhead.b  2\n", encoding="utf-8")
    assert [(f["module"], f["kind"]) for f in check_model(check)] == [("head.b", "shared")]
    question = Question("t", "badcase", "choice", {}, {}, choices=("available", "none"))
    try:
        question.parse("²")
    except AnswerError as exc:
        assert "choose one of" in str(exc)
    else:
        raise AssertionError("² was taken as a choice")
    assert question.parse("2") == "none"


def test_a_case_with_unicode_digits_in_its_config_triages(tmp_path):
    case = build("cliff", tmp_path)
    (case / "hb.yaml").write_text("compiler_parameters: {core_num: ²}\n", encoding="utf-8")
    text = (case / "case.yaml").read_text(encoding="utf-8")
    (case / "case.yaml").write_text(text + "deploy: {config: hb.yaml}\n", encoding="utf-8")
    report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    assert not [f for f in report["facts"] if f["type"] == "core_num"]
